//! The store's error type.

use rusqlite::ErrorCode;

/// What went wrong in the store, classified so the caller can react: retry on [`Busy`], ask for
/// space on [`Full`], move the file aside on [`Corrupt`].
///
/// `op` names the operation that failed ("adding a grant"), so the message makes sense alone.
///
/// [`Busy`]: StoreError::Busy
/// [`Full`]: StoreError::Full
/// [`Corrupt`]: StoreError::Corrupt
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another connection holds a lock longer than the busy timeout (SQLITE_BUSY / SQLITE_LOCKED).
    #[error("store busy while {op}: another process holds a lock on the database; try again")]
    Busy {
        /// The operation that failed.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The disk, or the size cap set with [`OpenOptions::max_pages`](crate::OpenOptions), is full
    /// (SQLITE_FULL).
    #[error(
        "store full while {op}: free disk space or prune old events (`sandgate` keeps working without history)"
    )]
    Full {
        /// The operation that failed.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is not a database or is damaged (SQLITE_CORRUPT / SQLITE_NOTADB).
    #[error("store file corrupt while {op}: move the database file aside and restart sandgate")]
    Corrupt {
        /// The operation that failed.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// Reading or writing the file or its directory failed.
    #[error("store I/O error while {op}: {detail}")]
    Io {
        /// The operation that failed, with the path when one is involved.
        op: String,
        /// What the operating system or SQLite said.
        detail: String,
    },
    /// A schema migration failed; the database stays at `from`.
    #[error("store migration from schema version {from} to {to} failed: {reason}")]
    Migration {
        /// The version the file had.
        from: u32,
        /// The version the failed step was to reach.
        to: u32,
        /// Why.
        reason: String,
    },
    /// The file has a schema newer than this build knows; refusing to touch it.
    #[error(
        "store schema version {found} is newer than this sandgate supports ({supported}); \
         upgrade sandgate or use another data directory"
    )]
    NewerSchema {
        /// The file's `user_version`.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// Neither `$XDG_DATA_HOME` nor `$HOME` is set, so there is no default place for the store.
    #[error("no data directory: set XDG_DATA_HOME or HOME")]
    NoDataDir,
    /// The caller passed a value the store will not keep.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// The offending value.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The referenced row does not exist (or is no longer active).
    #[error("no {what} with id {id}")]
    NotFound {
        /// "sandbox" or "active grant".
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A row did not decode (a value outside the schema's domain); the file was edited by hand or
    /// is damaged.
    #[error("unreadable {what} in the store: {value:?}")]
    Decode {
        /// Which column.
        what: &'static str,
        /// The value found.
        value: String,
    },
    /// Any other SQLite failure (a bug in sandgate rather than an environmental problem).
    #[error("store error while {op}")]
    Sqlite {
        /// The operation that failed.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// Classifies a SQLite error raised while doing `op`.
    pub(crate) fn sqlite(op: &'static str, source: rusqlite::Error) -> Self {
        let code = match &source {
            rusqlite::Error::SqliteFailure(e, _) => Some(e.code),
            _ => None,
        };
        match code {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StoreError::Busy { op, source }
            }
            Some(ErrorCode::DiskFull) => StoreError::Full { op, source },
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
                StoreError::Corrupt { op, source }
            }
            Some(
                ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::FileLockingProtocolFailed,
            ) => StoreError::Io { op: op.to_string(), detail: source.to_string() },
            _ => StoreError::Sqlite { op, source },
        }
    }

    /// Whether retrying later may succeed (the database was busy or locked).
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Busy { .. })
    }
}

/// `map_err` helper: `.map_err(sql("adding a grant"))`.
pub(crate) fn sql(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(op, e)
}
