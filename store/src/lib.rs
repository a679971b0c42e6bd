//! sandgate's durable state: the sandboxes it launched, the grants people gave, and the events
//! (requests, decisions, blocked packets, approvals) it saw, in one SQLite file.
//!
//! The file lives at `$XDG_DATA_HOME/sandgate/sandgate.db` ([`Store::default_path`]), mode 0600 in
//! a 0700 directory, in WAL mode so that a `kill -9` at any moment loses at most the transaction in
//! flight and never corrupts what was committed. The schema is versioned (`PRAGMA user_version`)
//! and migrated forward on [`Store::open`]; a file written by a newer sandgate is refused.
//!
//! What this crate does not do: it does not match host names against grant patterns (patterns are
//! stored as the caller validated them; the caller matches), and it does not decide anything. Its
//! calls are synchronous and short; async callers run them on a blocking thread
//! (`tokio::task::spawn_blocking`). The one call on a hot path, recording an event, goes through
//! [`EventWriter`], which never blocks: a bounded queue drained by a writer thread that commits one
//! transaction per batch and counts what it had to drop.
//!
//! The traffic log as people read it (`sandgate log`, `sandgate watch`) is shaped here too: its
//! lines ([`TrafficLine`]), their filters ([`TrafficFilter`], host patterns from
//! `sandgate-config`), the paged read of the newest lines that pass them
//! ([`Store::traffic_lines`]) and the per-host summary rows ([`HostRow`]).
//!
//! Errors are [`StoreError`], which tells a busy or locked database, a full disk (or the configured
//! size cap), a corrupt file and an I/O failure apart, so the daemon can report them plainly.
//!
//! # Why these choices
//!
//! - SQLite (`rusqlite`, bundled), not files: `sandgate log` reads while the daemon writes, a
//!   crash must not corrupt what was committed (WAL), and grants need indexed lookups. Bundled so
//!   the build does not depend on the host's libsqlite3 version.
//! - Synchronous `rusqlite`, not `sqlx`: every call is short, the one hot path is already off the
//!   async threads ([`EventWriter`]), and `sqlx` would bring its macro and driver stack for none
//!   of its features.

#![forbid(unsafe_code)]

mod error;
mod events;
mod model;
mod schema;
mod store;
mod time;
mod traffic;

pub use error::StoreError;
pub use events::{EventSender, EventWriter, EventWriterConfig, EventWriterStats};
pub use model::{
    Effect, EventKind, EventQuery, Grant, GrantId, GrantList, GrantScope, GrantTarget, HostSummary,
    NewEvent, NewGrant, NewSandbox, Registration, SandboxRecord, SandboxState, StoreCounts,
    StoredEvent, TrafficDecision, TrafficQuery,
};
pub use schema::SCHEMA_VERSION;
pub use store::{OpenOptions, Store};
pub use time::Timestamp;
pub use traffic::{
    HostRow, NOT_STORED, OTHER_HOSTS, SandboxCommands, TrafficFilter, TrafficLine, clock,
};
