//! The event writer: the proxy records events without ever waiting for the disk.
//!
//! Senders push into a bounded queue with `try_send`; when the queue is full the event is
//! dropped and counted (history is worth less than latency). One thread drains the queue and
//! commits each batch in one transaction on its own connection, then publishes the stored events
//! to subscribers (`sandgate watch`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::broadcast;

use crate::store::{append_events, connect};
use crate::{NewEvent, Store, StoreError, StoredEvent};

/// Sizes of the [`EventWriter`]'s queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventWriterConfig {
    /// Events that may wait for the writer; beyond that they are dropped and counted.
    pub capacity: usize,
    /// Events committed in one transaction at most.
    pub max_batch: usize,
    /// Stored events buffered per subscriber; a slower subscriber sees `Lagged`.
    pub subscriber_capacity: usize,
}

impl Default for EventWriterConfig {
    fn default() -> Self {
        EventWriterConfig { capacity: 8192, max_batch: 512, subscriber_capacity: 1024 }
    }
}

/// What the writer has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventWriterStats {
    /// Events committed.
    pub written: u64,
    /// Events dropped because the queue was full or the writer had stopped.
    pub dropped: u64,
    /// Events lost because their batch could not be written (disk full, ...).
    pub failed: u64,
    /// Transactions committed.
    pub batches: u64,
    /// The last write error, if any.
    pub last_error: Option<String>,
}

enum Msg {
    Event(NewEvent),
    Flush(mpsc::Sender<()>),
    Shutdown,
}

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    batches: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// The handle the hot path holds: cheap to clone, [`send`](Self::send) never blocks.
#[derive(Clone)]
pub struct EventSender {
    tx: SyncSender<Msg>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender").finish_non_exhaustive()
    }
}

impl EventSender {
    /// Queues an event; `false` when it was dropped (queue full or writer stopped), which is
    /// counted in [`EventWriterStats::dropped`]. Never blocks.
    pub fn send(&self, event: NewEvent) -> bool {
        match self.tx.try_send(Msg::Event(event)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Blocks until every event queued before this call is committed (or failed), or until
    /// `timeout`; `false` on the time-out or when the writer has stopped. For readers of the
    /// store that must see what was recorded so far (`sandgate log`), never for the hot path.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done_tx, done_rx) = mpsc::channel();
        // A blocking send: the marker must queue behind what is already there, so a full
        // queue is waited for (within the caller's patience, as the writer drains it).
        if self.tx.send(Msg::Flush(done_tx)).is_err() {
            return false;
        }
        done_rx.recv_timeout(timeout).is_ok()
    }
}

/// A background writer of events into a [`Store`]'s file. Dropping it flushes what is queued and
/// stops the thread.
pub struct EventWriter {
    sender: EventSender,
    published: broadcast::Sender<StoredEvent>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter").field("stats", &self.stats()).finish()
    }
}

impl EventWriter {
    /// Opens a second connection to `store`'s file (`synchronous=NORMAL`) and starts the writer
    /// thread.
    pub fn start(store: &Store, config: EventWriterConfig) -> Result<EventWriter, StoreError> {
        let conn = connect(store.path(), store.options(), "NORMAL")?;
        let (tx, rx) = mpsc::sync_channel(config.capacity.max(1));
        let (published, _) = broadcast::channel(config.subscriber_capacity.max(1));
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            conn,
            rx,
            max_batch: config.max_batch.max(1),
            counters: counters.clone(),
            published: published.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("sandgate-events".into())
            .spawn(move || worker.run())
            .map_err(|e| StoreError::Io {
                op: "starting the event writer thread".into(),
                detail: e.to_string(),
            })?;
        Ok(EventWriter { sender: EventSender { tx, counters }, published, thread: Some(thread) })
    }

    /// A handle for recording events.
    pub fn sender(&self) -> EventSender {
        self.sender.clone()
    }

    /// Queues an event (see [`EventSender::send`]).
    pub fn send(&self, event: NewEvent) -> bool {
        self.sender.send(event)
    }

    /// Every event committed from now on, with its id (a `tokio` broadcast receiver; usable from
    /// sync code with `try_recv` / `blocking_recv`).
    pub fn subscribe(&self) -> broadcast::Receiver<StoredEvent> {
        self.published.subscribe()
    }

    /// Counters so far.
    pub fn stats(&self) -> EventWriterStats {
        let c = &self.sender.counters;
        EventWriterStats {
            written: c.written.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            last_error: c.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Blocks until every event queued before this call is written (or failed). Not for the
    /// hot path: for shutdown, `status`, and tests.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::channel();
        if self.sender.tx.send(Msg::Flush(done_tx)).is_ok() {
            // An error means the writer is gone, so nothing is pending either.
            let _ = done_rx.recv();
        }
    }

    /// Writes what is queued, stops the thread and returns the final counters.
    pub fn shutdown(mut self) -> EventWriterStats {
        self.stop();
        self.stats()
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.sender.tx.send(Msg::Shutdown);
            if thread.join().is_err() {
                tracing::error!("the event writer thread panicked");
            }
        }
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    conn: Connection,
    rx: Receiver<Msg>,
    max_batch: usize,
    counters: Arc<Counters>,
    published: broadcast::Sender<StoredEvent>,
}

impl Worker {
    fn run(mut self) {
        let mut batch = Vec::with_capacity(self.max_batch);
        let mut flushes = Vec::new();
        loop {
            let mut stop = match self.rx.recv() {
                Ok(msg) => self.take(msg, &mut batch, &mut flushes),
                Err(_) => true,
            };
            while !stop && batch.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(msg) => stop = self.take(msg, &mut batch, &mut flushes),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stop = true;
                    }
                }
            }
            if stop {
                // Drain what is still queued so shutdown loses nothing already accepted.
                while let Ok(msg) = self.rx.try_recv() {
                    self.take(msg, &mut batch, &mut flushes);
                    if batch.len() >= self.max_batch {
                        self.write(&mut batch);
                    }
                }
            }
            self.write(&mut batch);
            for f in flushes.drain(..) {
                let _ = f.send(());
            }
            if stop {
                return;
            }
        }
    }

    /// Returns `true` on shutdown.
    fn take(
        &self,
        msg: Msg,
        batch: &mut Vec<NewEvent>,
        flushes: &mut Vec<mpsc::Sender<()>>,
    ) -> bool {
        match msg {
            Msg::Event(e) => {
                batch.push(e);
                false
            }
            Msg::Flush(done) => {
                flushes.push(done);
                false
            }
            Msg::Shutdown => true,
        }
    }

    fn write(&mut self, batch: &mut Vec<NewEvent>) {
        if batch.is_empty() {
            return;
        }
        let mut delay = Duration::from_millis(20);
        let mut result = append_events(&mut self.conn, batch);
        // Busy despite the busy timeout: someone holds a long write lock. Try a little more,
        // while new events keep queueing (or are dropped, counted) behind us.
        for _ in 0..3 {
            match &result {
                Err(e) if e.is_busy() => {
                    std::thread::sleep(delay);
                    delay *= 2;
                    result = append_events(&mut self.conn, batch);
                }
                _ => break,
            }
        }
        let c = &self.counters;
        match result {
            Ok(ids) => {
                c.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                c.batches.fetch_add(1, Ordering::Relaxed);
                if self.published.receiver_count() > 0 {
                    for (id, event) in ids.into_iter().zip(batch.drain(..)) {
                        let _ = self.published.send(StoredEvent { id, event });
                    }
                }
            }
            Err(e) => {
                c.failed.fetch_add(batch.len() as u64, Ordering::Relaxed);
                tracing::warn!(error = %e, events = batch.len(), "could not record events");
                *c.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            }
        }
        batch.clear();
    }
}
