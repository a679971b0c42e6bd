//! The [`Store`]: one SQLite connection behind a mutex, shared by clones.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::error::sql;
use crate::model::{GrantColumns, HostSummary, TrafficDecision, TrafficQuery};
use crate::{
    EventKind, EventQuery, Grant, GrantId, GrantList, GrantTarget, NewEvent, NewGrant, NewSandbox,
    Registration, SandboxRecord, SandboxState, StoreCounts, StoreError, StoredEvent, Timestamp,
    schema,
};

/// How to open a [`Store`]. `OpenOptions::default()` is what the daemon uses.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub(crate) busy_timeout: Duration,
    pub(crate) max_pages: Option<u32>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { busy_timeout: Duration::from_secs(2), max_pages: None }
    }
}

impl OpenOptions {
    /// The defaults: 2 s busy timeout, no size cap.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a statement waits for another connection's lock before failing with
    /// [`StoreError::Busy`].
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }

    /// Caps the file at `pages` database pages (`PRAGMA max_page_count`; 4 KiB each); writes
    /// beyond it fail with [`StoreError::Full`]. The cap never goes below the current size.
    pub fn max_pages(mut self, pages: u32) -> Self {
        self.max_pages = Some(pages);
        self
    }

    /// Opens (creating if needed) the store at `path`; see [`Store::open`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path.as_ref(), self.clone())
    }
}

/// sandgate's state database. Cheap to clone; clones share one connection.
///
/// Every method is a short synchronous transaction. Durability: this connection runs with
/// `synchronous=FULL`, so a grant a person gave survives even a power cut once the call
/// returns; the [`EventWriter`](crate::EventWriter)'s connection uses `NORMAL` (WAL keeps it
/// consistent; a power cut may lose the last batch of history, never corrupt it).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Database>,
}

/// The open SQLite database behind every clone of a [`Store`]: its path, how it was opened, and
/// the one connection (writes are serialised through it).
struct Database {
    path: PathBuf,
    options: OpenOptions,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

const GRANT_COLUMNS: &str = "id, pattern, port, effect, scope, target, sandbox_id, project, \
                             approved_by, channel, created, expires, used, revoked";

const SANDBOX_COLUMNS: &str =
    "id, tier, command, cwd, project, uid, pid, started, ended, exit_status, state";

/// [`Store::traffic_summary`]: ?1 sandbox, ?2 decision; whole days from ?3; whole minutes from
/// ?4 up to ?5; raw events from ?6 (NULL: none) up to ?7. `rule` is a bare column beside the
/// single max(): SQLite takes it from the row with the newest `last_seen`.
const TRAFFIC_SUMMARY: &str = "SELECT host, sum(connections), \
            sum(CASE decision WHEN 'allow' THEN connections ELSE 0 END), \
            sum(bytes_up), sum(bytes_down), max(last_seen), rule \
     FROM (SELECT host, decision, connections, bytes_up, bytes_down, last_seen, rule \
           FROM traffic_days WHERE day >= ?3 \
           AND (?1 IS NULL OR sandbox = ?1) AND (?2 IS NULL OR decision = ?2) \
           UNION ALL \
           SELECT host, decision, connections, bytes_up, bytes_down, last_seen, rule \
           FROM traffic_minutes WHERE minute >= ?4 AND minute < ?5 \
           AND (?1 IS NULL OR sandbox = ?1) AND (?2 IS NULL OR decision = ?2) \
           UNION ALL \
           SELECT host, decision, connections, bytes_up, bytes_down, time, rule \
           FROM traffic_events WHERE ?6 IS NOT NULL AND time >= ?6 AND time < ?7 \
           AND (?1 IS NULL OR sandbox = ?1) AND (?2 IS NULL OR decision = ?2)) \
     GROUP BY host ORDER BY 2 DESC, host";

impl Store {
    /// `$XDG_DATA_HOME/sandgate/sandgate.db`, or `$HOME/.local/share/sandgate/sandgate.db` when
    /// `XDG_DATA_HOME` is unset, empty or relative (as the XDG spec says).
    pub fn default_path() -> Result<PathBuf, StoreError> {
        default_path_from(std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME"))
    }

    /// Opens the store at `path` with the default [`OpenOptions`].
    ///
    /// Creates the parent directory (mode 0700) and the file (mode 0600) when missing and
    /// tightens them when they are more open; sets WAL, `foreign_keys=ON` and the busy timeout;
    /// migrates the schema to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION).
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with(path.as_ref(), OpenOptions::default())
    }

    fn open_with(path: &Path, options: OpenOptions) -> Result<Store, StoreError> {
        prepare_files(path)?;
        let mut conn = connect(path, &options, "FULL")?;
        schema::migrate(&mut conn)?;
        Ok(Store {
            inner: Arc::new(Database { path: path.to_path_buf(), options, conn: Mutex::new(conn) }),
        })
    }

    /// Test support: opens `path` and migrates it only to `version` (to build old files).
    #[doc(hidden)]
    pub fn create_at_version(path: impl AsRef<Path>, version: u32) -> Result<(), StoreError> {
        let path = path.as_ref();
        prepare_files(path)?;
        let mut conn = connect(path, &OpenOptions::default(), "FULL")?;
        schema::migrate_to(&mut conn, version)?;
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn options(&self) -> &OpenOptions {
        &self.inner.options
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        schema::version(&self.conn())
    }

    /// Runs `PRAGMA integrity_check`; an empty list means the file is sound.
    pub fn integrity_check(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(sql("checking integrity"))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(sql("checking integrity"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql("checking integrity"))?;
        Ok(rows.into_iter().filter(|r| r != "ok").collect())
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves no half-done transaction (rusqlite rolls back
        // on drop), so the connection is still usable.
        self.inner.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ----- sandboxes -----

    /// Records a sandbox as running. Registering a known id again (a launcher re-registering
    /// with a restarted daemon) refreshes its pid and marks it running; the uid must match.
    pub fn register_sandbox(&self, s: &NewSandbox) -> Result<Registration, StoreError> {
        const OP: &str = "registering a sandbox";
        if s.id.is_empty() || s.id.len() > 128 || s.id.chars().any(|c| c.is_control()) {
            return Err(StoreError::Invalid {
                what: "sandbox id",
                value: s.id.clone(),
                reason: "must be 1 to 128 printable characters",
            });
        }
        let command = serde_json::to_string(&s.command).map_err(|e| StoreError::Invalid {
            what: "sandbox command",
            value: format!("{:?}", s.command),
            reason: if e.is_io() { "i/o" } else { "not serialisable" },
        })?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql(OP))?;
        let known: Option<u32> = tx
            .query_row("SELECT uid FROM sandboxes WHERE id = ?1", [&s.id], |r| r.get(0))
            .optional()
            .map_err(sql(OP))?;
        let outcome = match known {
            Some(uid) if uid != s.uid => {
                return Err(StoreError::Invalid {
                    what: "sandbox id",
                    value: s.id.clone(),
                    reason: "already registered by another uid",
                });
            }
            Some(_) => {
                tx.execute(
                    "UPDATE sandboxes SET pid = ?2, state = 'running', ended = NULL, \
                     exit_status = NULL WHERE id = ?1",
                    params![s.id, s.pid],
                )
                .map_err(sql(OP))?;
                Registration::Again
            }
            None => {
                tx.execute(
                    "INSERT INTO sandboxes (id, tier, command, cwd, project, uid, pid, started, \
                     state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running')",
                    params![
                        s.id,
                        s.tier,
                        command,
                        s.cwd.to_string_lossy(),
                        s.project,
                        s.uid,
                        s.pid,
                        s.started.0
                    ],
                )
                .map_err(sql(OP))?;
                Registration::New
            }
        };
        tx.commit().map_err(sql(OP))?;
        Ok(outcome)
    }

    /// Marks a running sandbox as lost (its launcher went away without reporting the end);
    /// `false` when it was not running.
    pub fn mark_lost(&self, id: &str, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .execute(
                "UPDATE sandboxes SET state = 'lost', ended = ?2 WHERE id = ?1 AND state = 'running'",
                params![id, now.0],
            )
            .map_err(sql("marking a sandbox lost"))?;
        Ok(n == 1)
    }

    /// Records that a sandbox's command ended with `exit_status` (None: unknown).
    pub fn finish_sandbox(
        &self,
        id: &str,
        exit_status: Option<i32>,
        ended: Timestamp,
    ) -> Result<(), StoreError> {
        let n = self
            .conn()
            .execute(
                "UPDATE sandboxes SET state = 'exited', ended = ?2, exit_status = ?3 WHERE id = ?1",
                params![id, ended.0, exit_status],
            )
            .map_err(sql("finishing a sandbox"))?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "sandbox", id: id.to_string() });
        }
        Ok(())
    }

    /// One sandbox by id.
    pub fn sandbox(&self, id: &str) -> Result<Option<SandboxRecord>, StoreError> {
        const OP: &str = "reading a sandbox";
        let conn = self.conn();
        let raw = conn
            .query_row(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = ?1"),
                [id],
                SandboxColumns::read,
            )
            .optional()
            .map_err(sql(OP))?;
        raw.map(SandboxColumns::decode).transpose()
    }

    /// Sandboxes, oldest first; only the running ones when `running_only`.
    pub fn list_sandboxes(&self, running_only: bool) -> Result<Vec<SandboxRecord>, StoreError> {
        const OP: &str = "listing sandboxes";
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SANDBOX_COLUMNS} FROM sandboxes \
                 WHERE (?1 = 0 OR state = 'running') ORDER BY started DESC, id DESC"
            ))
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map([running_only], SandboxColumns::read)
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        rows.into_iter().map(SandboxColumns::decode).collect()
    }

    /// Marks as lost every running sandbox whose launcher `is_alive(pid, started)` says is gone
    /// (run at daemon start); returns their ids. `started` is when the sandbox was first
    /// registered, so the caller can tell its launcher from a later process given the same pid.
    pub fn reap_dead(
        &self,
        is_alive: impl Fn(u32, Timestamp) -> bool,
        now: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        const OP: &str = "reaping dead sandboxes";
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql(OP))?;
        let running: Vec<(String, u32, i64)> = {
            let mut stmt = tx
                .prepare("SELECT id, pid, started FROM sandboxes WHERE state = 'running'")
                .map_err(sql(OP))?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(sql(OP))?
                .collect::<Result<_, _>>()
                .map_err(sql(OP))?
        };
        let mut lost = Vec::new();
        for (id, pid, started) in running {
            if !is_alive(pid, Timestamp(started)) {
                tx.execute(
                    "UPDATE sandboxes SET state = 'lost', ended = ?2 WHERE id = ?1",
                    params![id, now.0],
                )
                .map_err(sql(OP))?;
                lost.push(id);
            }
        }
        tx.commit().map_err(sql(OP))?;
        Ok(lost)
    }

    // ----- grants -----

    /// Records a grant and returns it with its id. A sandbox target must be a registered sandbox.
    pub fn add_grant(&self, g: &NewGrant) -> Result<Grant, StoreError> {
        const OP: &str = "adding a grant";
        g.validate()?;
        let (sandbox_id, project) = match &g.target {
            GrantTarget::Sandbox(s) => (Some(s.as_str()), None),
            GrantTarget::Project(p) => (None, Some(p.as_str())),
            GrantTarget::Global => (None, None),
        };
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql(OP))?;
        if let Some(s) = sandbox_id {
            let known = tx
                .query_row("SELECT 1 FROM sandboxes WHERE id = ?1", [s], |_| Ok(()))
                .optional()
                .map_err(sql(OP))?;
            if known.is_none() {
                return Err(StoreError::NotFound { what: "sandbox", id: s.to_string() });
            }
        }
        tx.execute(
            "INSERT INTO grants (pattern, port, effect, scope, target, sandbox_id, project, \
             approved_by, channel, created, expires) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                g.pattern,
                g.port,
                g.effect.as_str(),
                g.scope_str(),
                g.target_str(),
                sandbox_id,
                project,
                g.approved_by,
                g.channel,
                g.created.0,
                g.expires().map(|t| t.0),
            ],
        )
        .map_err(sql(OP))?;
        let id = GrantId(tx.last_insert_rowid());
        tx.commit().map_err(sql(OP))?;
        Ok(Grant { id, grant: g.clone(), used: None, revoked: None })
    }

    /// One grant by id, whatever its state.
    pub fn grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        let conn = self.conn();
        grant_by_id(&conn, id)
    }

    /// Grants, oldest first.
    pub fn list_grants(&self, which: GrantList) -> Result<Vec<Grant>, StoreError> {
        const OP: &str = "listing grants";
        let (filter, now) = match which {
            GrantList::Live(now) => (
                "WHERE revoked IS NULL AND used IS NULL AND (expires IS NULL OR expires > ?1)",
                now.0,
            ),
            // A grant for one sandbox ends with it (exited or lost). Decisions do not need the
            // filter (such a grant matches only its own sandbox's requests), and must not have
            // it: a sandbox marked lost can register again.
            GrantList::Current(now) => (
                "WHERE revoked IS NULL AND used IS NULL AND (expires IS NULL OR expires > ?1) \
                 AND (sandbox_id IS NULL OR sandbox_id IN \
                      (SELECT id FROM sandboxes WHERE state = 'running'))",
                now.0,
            ),
            GrantList::All => ("WHERE ?1 = ?1", 0),
        };
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!("SELECT {GRANT_COLUMNS} FROM grants {filter} ORDER BY id"))
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map([now], read_grant)
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        rows.into_iter().map(Grant::from_columns).collect()
    }

    /// Revokes a grant that is not revoked yet and returns it as it now stands.
    pub fn revoke_grant(&self, id: GrantId, now: Timestamp) -> Result<Grant, StoreError> {
        const OP: &str = "revoking a grant";
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql(OP))?;
        let n = tx
            .execute(
                "UPDATE grants SET revoked = ?2 WHERE id = ?1 AND revoked IS NULL",
                params![id.0, now.0],
            )
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "active grant", id: id.to_string() });
        }
        let g = grant_by_id(&tx, id)?
            .ok_or_else(|| StoreError::NotFound { what: "active grant", id: id.to_string() })?;
        tx.commit().map_err(sql(OP))?;
        Ok(g)
    }

    /// The grants that apply at `now` to a request from sandbox `sandbox` of project `project`:
    /// that sandbox's, that project's and the global ones, not revoked, not expired, and (for
    /// `once` grants) not consumed. Ordered by id. A `once` grant must then be claimed with
    /// [`take_once`](Self::take_once) before it is used, since another request may race for it.
    pub fn active_grants(
        &self,
        sandbox: Option<&str>,
        project: Option<&str>,
        now: Timestamp,
    ) -> Result<Vec<Grant>, StoreError> {
        const OP: &str = "reading active grants";
        // Three arms, each matching one partial index exactly.
        let live = "revoked IS NULL AND used IS NULL AND (expires IS NULL OR expires > ?3)";
        let q = format!(
            "SELECT {GRANT_COLUMNS} FROM grants WHERE target = 'sandbox' AND sandbox_id = ?1 AND {live} \
             UNION ALL SELECT {GRANT_COLUMNS} FROM grants WHERE target = 'project' AND project = ?2 AND {live} \
             UNION ALL SELECT {GRANT_COLUMNS} FROM grants WHERE target = 'global' AND {live} \
             ORDER BY id"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&q).map_err(sql(OP))?;
        let rows = stmt
            .query_map(params![sandbox, project, now.0], read_grant)
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        rows.into_iter().map(Grant::from_columns).collect()
    }

    /// Consumes a live `once` grant; `true` if this call got it, `false` if it was already used,
    /// revoked, or is not a `once` grant. Atomic: of two racing callers exactly one gets `true`.
    pub fn take_once(&self, id: GrantId, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .execute(
                "UPDATE grants SET used = ?2 WHERE id = ?1 AND scope = 'once' \
                 AND used IS NULL AND revoked IS NULL",
                params![id.0, now.0],
            )
            .map_err(sql("consuming a once grant"))?;
        Ok(n == 1)
    }

    // ----- events -----

    /// Appends events in one transaction and returns their ids. The proxy's hot path should use
    /// an [`EventWriter`](crate::EventWriter) instead, which batches and never blocks.
    pub fn append_events(&self, events: &[NewEvent]) -> Result<Vec<i64>, StoreError> {
        let mut conn = self.conn();
        append_events(&mut conn, events)
    }

    /// The newest events matching `q`, newest first.
    pub fn recent_events(&self, q: &EventQuery) -> Result<Vec<StoredEvent>, StoreError> {
        const OP: &str = "reading events";
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, time, sandbox, kind, details FROM events \
                 WHERE (?1 IS NULL OR sandbox = ?1) AND (?2 IS NULL OR kind = ?2) \
                 AND (?3 IS NULL OR time >= ?3) ORDER BY id DESC LIMIT ?4",
            )
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map(
                params![q.sandbox, q.kind.map(EventKind::as_str), q.since.map(|t| t.0), q.limit],
                EventColumns::read,
            )
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        rows.into_iter().map(EventColumns::decode).collect()
    }

    /// One page of traffic events (`decision` and `blocked_packet`), newest first: those with an
    /// id below `before` (all when `None`), of one sandbox if given, at or after `since`, with
    /// `decision` if given (decided here, in SQL, through the `traffic_events` view: a rare
    /// decision is found without decoding every event). The log pages through them with the
    /// last id it got, filtering as it goes, so its filters apply before its line limit.
    pub fn traffic_events_page(
        &self,
        sandbox: Option<&str>,
        since: Option<Timestamp>,
        decision: Option<TrafficDecision>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        const OP: &str = "reading traffic events";
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, time, sandbox, kind, details FROM events AS e \
                 WHERE kind IN ('decision', 'blocked_packet') AND (?1 IS NULL OR sandbox = ?1) \
                 AND (?2 IS NULL OR time >= ?2) AND (?3 IS NULL OR id < ?3) \
                 AND (?5 IS NULL OR EXISTS (SELECT 1 FROM traffic_events AS t \
                                            WHERE t.id = e.id AND t.decision = ?5)) \
                 ORDER BY id DESC LIMIT ?4",
            )
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map(
                params![
                    sandbox,
                    since.map(|t| t.0),
                    before,
                    limit,
                    decision.map(TrafficDecision::as_str)
                ],
                EventColumns::read,
            )
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        rows.into_iter().map(EventColumns::decode).collect()
    }

    /// The traffic log grouped by host, most connections first: proxied connections (`decision`
    /// events) and blocked-packet bursts (`blocked_packet`, counted by their packets), filtered
    /// by `q`.
    ///
    /// Read from the per-day and per-minute aggregates the schema's triggers keep (see the V4
    /// migration for why), so the cost follows hosts and days, not events. `since` stays exact:
    /// whole days from the day table, the whole minutes before them from the minute table, and
    /// the raw events of the partial minute before those (through `events_time`).
    pub fn traffic_summary(&self, q: &TrafficQuery) -> Result<Vec<HostSummary>, StoreError> {
        const OP: &str = "summarising traffic";
        const MINUTE: i64 = 60_000;
        const DAY: i64 = 86_400_000;
        // The first bucket starting at or after `t`.
        let ceil = |t: i64, size: i64| t.div_euclid(size) + i64::from(t.rem_euclid(size) != 0);
        // All time: every day, no minutes, no raw tail.
        let (first_day, first_minute, since) = match q.since {
            Some(t) => (ceil(t.0, DAY), ceil(t.0, MINUTE), Some(t.0)),
            None => (i64::MIN, 0, None),
        };
        let minutes_end = first_day.saturating_mul(DAY / MINUTE);
        let tail_end = first_minute.saturating_mul(MINUTE);
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(TRAFFIC_SUMMARY).map_err(sql(OP))?;
        let rows = stmt
            .query_map(
                params![
                    q.sandbox,
                    q.decision.map(TrafficDecision::as_str),
                    first_day,
                    first_minute,
                    minutes_end,
                    since,
                    tail_end
                ],
                |r| {
                    Ok(HostSummary {
                        host: r.get(0)?,
                        connections: r.get::<_, i64>(1)?.max(0) as u64,
                        allowed: r.get::<_, i64>(2)?.max(0) as u64,
                        bytes_up: r.get::<_, i64>(3)?.max(0) as u64,
                        bytes_down: r.get::<_, i64>(4)?.max(0) as u64,
                        last_seen: Timestamp(r.get(5)?),
                        rule: r.get(6)?,
                    })
                },
            )
            .map_err(sql(OP))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(OP))?;
        Ok(rows)
    }

    /// Deletes events older than `older_than`, in chunks so writers are not held up; returns
    /// how many were deleted.
    pub fn prune_events(&self, older_than: Timestamp) -> Result<u64, StoreError> {
        const CHUNK: i64 = 5000;
        let mut total = 0u64;
        loop {
            let n = self
                .conn()
                .execute(
                    "DELETE FROM events WHERE id IN \
                     (SELECT id FROM events WHERE time < ?1 ORDER BY id LIMIT ?2)",
                    params![older_than.0, CHUNK],
                )
                .map_err(sql("pruning events"))?;
            total += n as u64;
            if (n as i64) < CHUNK {
                return Ok(total);
            }
        }
    }

    // ----- meta -----

    /// A value of the key-value table (e.g. a pf token), if set.
    pub fn meta_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn()
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(sql("reading a meta value"))
    }

    /// Sets a value of the key-value table.
    pub fn meta_set(&self, key: &str, value: &str, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT INTO meta (key, value, updated) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated = excluded.updated",
                params![key, value, now.0],
            )
            .map_err(sql("writing a meta value"))?;
        Ok(())
    }

    /// Removes a key; `true` if it was there.
    pub fn meta_delete(&self, key: &str) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .execute("DELETE FROM meta WHERE key = ?1", [key])
            .map_err(sql("deleting a meta value"))?;
        Ok(n == 1)
    }

    /// Counts for `sandgate status`.
    pub fn counts(&self, now: Timestamp) -> Result<StoreCounts, StoreError> {
        const OP: &str = "counting";
        let conn = self.conn();
        let one = |q: &str, p: &[&dyn rusqlite::ToSql]| -> Result<u64, StoreError> {
            conn.query_row(q, p, |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(sql(OP))
        };
        Ok(StoreCounts {
            sandboxes_running: one("SELECT count(*) FROM sandboxes WHERE state = 'running'", &[])?,
            // What `rules` lists (GrantList::Current): a sandbox's grants end with it.
            grants_live: one(
                "SELECT count(*) FROM grants WHERE revoked IS NULL AND used IS NULL \
                 AND (expires IS NULL OR expires > ?1) \
                 AND (sandbox_id IS NULL OR sandbox_id IN \
                      (SELECT id FROM sandboxes WHERE state = 'running'))",
                &[&now.0],
            )?,
            events: one("SELECT count(*) FROM events", &[])?,
        })
    }
}

fn default_path_from(
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, StoreError> {
    let base = match xdg_data_home.map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => match home.map(PathBuf::from) {
            Some(h) if h.is_absolute() => h.join(".local/share"),
            _ => return Err(StoreError::NoDataDir),
        },
    };
    Ok(base.join("sandgate").join("sandgate.db"))
}

/// Creates the directory (0700) and the file (0600), tightening existing ones.
fn prepare_files(path: &Path) -> Result<(), StoreError> {
    let io = |op: &str, e: std::io::Error| StoreError::Io {
        op: format!("{op} {}", path.display()),
        detail: e.to_string(),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("creating the directory of", e))?;
        tighten(dir, 0o700).map_err(|e| io("restricting the directory of", e))?;
    }
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| io("creating", e))?;
    // SQLite gives the -wal and -shm files the database file's mode.
    tighten(path, 0o600).map_err(|e| io("restricting", e))?;
    Ok(())
}

fn tighten(path: &Path, mode: u32) -> std::io::Result<()> {
    let meta = fs::metadata(path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "store path was accessible to others; restricting");
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Opens a connection with the store's pragmas; `synchronous` is `FULL` or `NORMAL`.
pub(crate) fn connect(
    path: &Path,
    options: &OpenOptions,
    synchronous: &str,
) -> Result<Connection, StoreError> {
    const OP: &str = "opening the database";
    let conn = Connection::open(path).map_err(|e| match StoreError::sqlite(OP, e) {
        StoreError::Sqlite { source, .. } => {
            StoreError::Io { op: format!("opening {}", path.display()), detail: source.to_string() }
        }
        other => other,
    })?;
    conn.busy_timeout(options.busy_timeout).map_err(sql(OP))?;
    let mode: String =
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(sql(OP))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(%mode, path = %path.display(), "the store could not switch to WAL mode");
    }
    conn.pragma_update(None, "synchronous", synchronous).map_err(sql(OP))?;
    conn.pragma_update(None, "foreign_keys", "ON").map_err(sql(OP))?;
    if let Some(pages) = options.max_pages {
        conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(sql(OP))?;
    }
    Ok(conn)
}

pub(crate) fn append_events(
    conn: &mut Connection,
    events: &[NewEvent],
) -> Result<Vec<i64>, StoreError> {
    const OP: &str = "appending events";
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql(OP))?;
    let mut ids = Vec::with_capacity(events.len());
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO events (time, sandbox, kind, details) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(sql(OP))?;
        for e in events {
            stmt.execute(params![e.time.0, e.sandbox, e.kind.as_str(), e.details.to_string()])
                .map_err(sql(OP))?;
            ids.push(tx.last_insert_rowid());
        }
    }
    tx.commit().map_err(sql(OP))?;
    Ok(ids)
}

fn grant_by_id(conn: &Connection, id: GrantId) -> Result<Option<Grant>, StoreError> {
    conn.query_row(&format!("SELECT {GRANT_COLUMNS} FROM grants WHERE id = ?1"), [id.0], read_grant)
        .optional()
        .map_err(sql("reading a grant"))?
        .map(Grant::from_columns)
        .transpose()
}

fn read_grant(r: &rusqlite::Row<'_>) -> rusqlite::Result<GrantColumns> {
    Ok(GrantColumns {
        id: r.get(0)?,
        pattern: r.get(1)?,
        port: r.get(2)?,
        effect: r.get(3)?,
        scope: r.get(4)?,
        target: r.get(5)?,
        sandbox_id: r.get(6)?,
        project: r.get(7)?,
        approved_by: r.get(8)?,
        channel: r.get(9)?,
        created: r.get(10)?,
        expires: r.get(11)?,
        used: r.get(12)?,
        revoked: r.get(13)?,
    })
}

/// An events row before decoding.
struct EventColumns(i64, i64, Option<String>, String, String);

impl EventColumns {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(EventColumns(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    }

    fn decode(self) -> Result<StoredEvent, StoreError> {
        let EventColumns(id, time, sandbox, kind, details) = self;
        let details = serde_json::from_str(&details)
            .map_err(|_| StoreError::Decode { what: "event details", value: details })?;
        Ok(StoredEvent {
            id,
            event: NewEvent {
                time: Timestamp(time),
                sandbox,
                kind: EventKind::parse(&kind)?,
                details,
            },
        })
    }
}

struct SandboxColumns {
    id: String,
    tier: String,
    command: String,
    cwd: String,
    project: Option<String>,
    uid: u32,
    pid: u32,
    started: i64,
    ended: Option<i64>,
    exit_status: Option<i32>,
    state: String,
}

impl SandboxColumns {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(SandboxColumns {
            id: r.get(0)?,
            tier: r.get(1)?,
            command: r.get(2)?,
            cwd: r.get(3)?,
            project: r.get(4)?,
            uid: r.get(5)?,
            pid: r.get(6)?,
            started: r.get(7)?,
            ended: r.get(8)?,
            exit_status: r.get(9)?,
            state: r.get(10)?,
        })
    }

    fn decode(self) -> Result<SandboxRecord, StoreError> {
        let command = serde_json::from_str(&self.command)
            .map_err(|_| StoreError::Decode { what: "sandbox command", value: self.command })?;
        Ok(SandboxRecord {
            sandbox: NewSandbox {
                id: self.id,
                tier: self.tier,
                command,
                cwd: PathBuf::from(self.cwd),
                project: self.project,
                uid: self.uid,
                pid: self.pid,
                started: Timestamp(self.started),
            },
            state: SandboxState::parse(&self.state)?,
            ended: self.ended.map(Timestamp),
            exit_status: self.exit_status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_path_follows_xdg_then_home() {
        let p = |x: Option<&str>, h: Option<&str>| {
            default_path_from(x.map(Into::into), h.map(Into::into)).map_err(|e| e.to_string())
        };
        let db = |s: &str| Ok(PathBuf::from(s));
        assert_eq!(p(Some("/x"), Some("/h")), db("/x/sandgate/sandgate.db"));
        assert_eq!(p(None, Some("/h")), db("/h/.local/share/sandgate/sandgate.db"));
        // Relative and empty XDG values are ignored, as the XDG spec says.
        assert_eq!(p(Some("rel"), Some("/h")), db("/h/.local/share/sandgate/sandgate.db"));
        assert_eq!(p(Some(""), Some("/h")), db("/h/.local/share/sandgate/sandgate.db"));
        assert!(p(None, None).is_err());
        assert!(p(None, Some("rel")).is_err());
    }

    /// The summary's cost follows hosts and minutes, not events: it must not read the events
    /// table beyond the partial minute's tail, which goes through the time index. (The summary
    /// before the `traffic` table scanned every event's JSON: ~2 s for a million.)
    #[test]
    fn the_traffic_summary_reads_the_aggregate_not_every_event() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let conn = store.conn();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {TRAFFIC_SUMMARY}"))
            .unwrap()
            .query_map(params![None::<String>, None::<String>, 0, 0, 0, 0, 0], |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!plan.iter().any(|p| p.contains("SCAN events")), "{plan:#?}");
        assert!(
            plan.iter().any(|p| p.contains("SEARCH events USING INDEX events_time")),
            "{plan:#?}"
        );
        for range in [
            "traffic_days USING PRIMARY KEY (day>?)",
            "traffic_minutes USING PRIMARY KEY (minute>? AND minute<?)",
        ] {
            assert!(plan.iter().any(|p| p.contains(range)), "{range}: {plan:#?}");
        }
    }

    #[test]
    fn active_grants_query_uses_the_partial_indices() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let conn = store.conn();
        let live = "revoked IS NULL AND used IS NULL AND (expires IS NULL OR expires > 0)";
        for (q, index) in [
            (
                format!(
                    "SELECT id FROM grants WHERE target = 'sandbox' AND sandbox_id = 'x' AND {live}"
                ),
                "grants_live_sandbox",
            ),
            (
                format!(
                    "SELECT id FROM grants WHERE target = 'project' AND project = 'p' AND {live}"
                ),
                "grants_live_project",
            ),
            (
                format!("SELECT id FROM grants WHERE target = 'global' AND {live}"),
                "grants_live_global",
            ),
        ] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {q}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(plan.iter().any(|p| p.contains(index)), "{q}: plan {plan:?} lacks {index}");
        }
    }
}
