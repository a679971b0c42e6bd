//! The exporter: a bounded queue the daemon's threads push records into without waiting, and a
//! task that batches them (by count and by time), posts them to the collector, and retries with
//! backoff. A collector that is down, slow or failing costs the daemon the records that do not
//! fit in the queue meanwhile, counted, and nothing else.
//!
//! Lifecycle: [`Telemetry::start`] spawns the task → [`Telemetry::log`] from anywhere (never
//! blocks) → every `interval` the pending batch and the counters are sent → [`Telemetry::stop`]
//! sends what is queued once more (no retries) within a deadline.
//!
//! Retries follow OTLP/HTTP: 429, 502, 503 and 504, and a connection that fails or answers
//! nothing within the request time-out, are retried (after `Retry-After` when the collector
//! gives one, at most the longest backoff); any other status drops the batch (counted as failed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::metrics::Counters;
use crate::otlp::{InstrumentationScope, LogRecord, Resource, encode_logs, encode_metrics};

/// Where and how to export.
#[derive(Clone)]
pub struct ExporterConfig {
    /// The collector.
    pub endpoint: sandgate_config::OtlpEndpoint,
    /// Headers sent with every request (authentication); never part of a body.
    pub headers: Vec<(String, String)>,
    /// The TLS client configuration for an `https` endpoint (system roots and `extra_roots`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The resource of the metrics (the host and the user).
    pub resource: Arc<Resource>,
    /// The scope of records and metrics.
    pub scope: InstrumentationScope,
    /// A batch is sent at the latest this long after its first record; counters are sent this
    /// often.
    pub interval: Duration,
    /// Records that may wait in the queue; past it they are dropped and counted.
    pub queue: usize,
    /// Records sent in one request at most.
    pub max_batch: usize,
    /// How long one request (connect, send, answer) may take.
    pub request_timeout: Duration,
    /// Retries of a batch after its first attempt.
    pub retries: u32,
    /// The first retry's delay; each next one doubles, up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest delay between attempts (and the most of a `Retry-After` obeyed).
    pub max_backoff: Duration,
}

impl ExporterConfig {
    /// The defaults for `endpoint`: a 5 s interval, 4,096 queued records, batches of 512, a 10 s
    /// request time-out, 5 retries from 0.5 s to 30 s.
    pub fn new(endpoint: sandgate_config::OtlpEndpoint, resource: Arc<Resource>) -> ExporterConfig {
        ExporterConfig {
            endpoint,
            headers: Vec::new(),
            tls: None,
            resource,
            scope: InstrumentationScope { name: "sandgate", version: env!("CARGO_PKG_VERSION") },
            interval: Duration::from_secs(5),
            queue: 4096,
            max_batch: 512,
            request_timeout: Duration::from_secs(10),
            retries: 5,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl std::fmt::Debug for ExporterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExporterConfig")
            .field("endpoint", &self.endpoint.to_string())
            .field("headers", &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// What the exporter has done so far (`sandgate status`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records the collector accepted.
    pub exported: u64,
    /// Records dropped because the queue was full (the collector too slow, down, or failing).
    pub dropped: u64,
    /// Records given up on: refused by the collector, or still failing after every retry.
    pub failed: u64,
    /// Metric exports the collector accepted.
    pub metric_exports: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct State {
    exported: AtomicU64,
    failed: AtomicU64,
    metric_exports: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl State {
    fn error(&self, e: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }
}

/// The handle: cheap to clone; [`log`](Self::log) and the [`counters`](Self::counters) never
/// block.
#[derive(Clone)]
pub struct Telemetry {
    tx: mpsc::Sender<LogRecord>,
    counters: Arc<Counters>,
    state: Arc<State>,
    stop: Arc<watch::Sender<bool>>,
    done: Arc<Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>,
    endpoint: String,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts the exporting task on `runtime`.
    pub fn start(config: ExporterConfig, runtime: &tokio::runtime::Handle) -> Telemetry {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let counters = Arc::new(Counters::default());
        let state = Arc::new(State::default());
        let endpoint = config.endpoint.to_string();
        let task = Task {
            client: Client { config: config.clone(), conn: None },
            config,
            rx,
            counters: counters.clone(),
            state: state.clone(),
            stop: stop_rx,
            start: SystemTime::now(),
        };
        runtime.spawn(async move {
            task.run().await;
            let _ = done_tx.send(());
        });
        Telemetry {
            tx,
            counters,
            state,
            stop: Arc::new(stop),
            done: Arc::new(Mutex::new(Some(done_rx))),
            endpoint,
        }
    }

    /// Queues a record; `false` when the queue was full (or the exporter stopped) and it was
    /// dropped, which is counted. Never blocks.
    pub fn log(&self, mut record: LogRecord) -> bool {
        record.bound();
        match self.tx.try_send(record) {
            Ok(()) => true,
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The counters exported as metrics.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The collector's URL as configured (no credentials: the configuration refuses them).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// What the exporter has done so far.
    pub fn stats(&self) -> ExportStats {
        ExportStats {
            exported: self.state.exported.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            failed: self.state.failed.load(Ordering::Relaxed),
            metric_exports: self.state.metric_exports.load(Ordering::Relaxed),
            last_error: self.state.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Stops the exporter: what is queued and the counters are sent once more (no retries),
    /// waiting at most `patience`.
    pub async fn stop(&self, patience: Duration) {
        let _ = self.stop.send(true);
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(done) = done {
            let _ = tokio::time::timeout(patience, done).await;
        }
    }
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Accepted.
    Done,
    /// Try again (after the collector's `Retry-After`, when it gave one).
    Retry(Option<Duration>),
    /// Give the batch up.
    Fail,
}

/// OTLP/HTTP's rule for a response status.
fn classify(status: u16, retry_after: Option<&str>) -> Verdict {
    match status {
        200..=299 => Verdict::Done,
        429 | 502 | 503 | 504 => Verdict::Retry(
            retry_after.and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs),
        ),
        _ => Verdict::Fail,
    }
}

/// The delay before retry `n` (0-based): `first` doubled `n` times, at most `max`.
fn backoff(first: Duration, max: Duration, n: u32) -> Duration {
    first.saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX)).min(max)
}

struct Task {
    config: ExporterConfig,
    client: Client,
    rx: mpsc::Receiver<LogRecord>,
    counters: Arc<Counters>,
    state: Arc<State>,
    stop: watch::Receiver<bool>,
    start: SystemTime,
}

impl Task {
    async fn run(mut self) {
        let interval = self.config.interval;
        let mut batch: Vec<LogRecord> = Vec::new();
        let mut batch_due: Option<Instant> = None;
        let mut metrics_due = Instant::now() + interval;
        loop {
            // A stop seen inside a retry's wait is not seen by `changed` again.
            if *self.stop.borrow() {
                break;
            }
            let wake = batch_due.map_or(metrics_due, |b| b.min(metrics_due));
            tokio::select! {
                r = self.rx.recv() => match r {
                    Some(record) => {
                        batch_due.get_or_insert_with(|| Instant::now() + interval);
                        batch.push(record);
                        if batch.len() >= self.config.max_batch {
                            self.send_logs(std::mem::take(&mut batch), true).await;
                            batch_due = None;
                        }
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(wake) => {
                    let now = Instant::now();
                    if batch_due.is_some_and(|b| b <= now) {
                        self.send_logs(std::mem::take(&mut batch), true).await;
                        batch_due = None;
                    }
                    if metrics_due <= now {
                        self.send_metrics().await;
                        metrics_due = Instant::now() + interval;
                    }
                }
                _ = self.stop.changed() => break,
            }
        }
        // Stopping: what is queued, once, in batches; then the counters.
        while let Ok(r) = self.rx.try_recv() {
            batch.push(r);
            if batch.len() >= self.config.max_batch {
                self.send_logs(std::mem::take(&mut batch), false).await;
            }
        }
        if !batch.is_empty() {
            self.send_logs(batch, false).await;
        }
        self.send_metrics().await;
    }

    async fn send_logs(&mut self, batch: Vec<LogRecord>, retry: bool) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let body = encode_logs(&self.config.scope, &batch, SystemTime::now());
        drop(batch);
        let path = self.config.endpoint.path("logs");
        if self.deliver(&path, body, retry).await {
            self.state.exported.fetch_add(n, Ordering::Relaxed);
        } else {
            self.state.failed.fetch_add(n, Ordering::Relaxed);
        }
    }

    async fn send_metrics(&mut self) {
        let body = encode_metrics(
            &self.config.resource,
            &self.config.scope,
            &self.counters.snapshot(),
            self.start,
            SystemTime::now(),
        );
        let path = self.config.endpoint.path("metrics");
        // Cumulative counters: a failed export is made good by the next one, so no retries.
        if self.deliver(&path, body, false).await {
            self.state.metric_exports.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Posts `body` to `path`, retrying as OTLP says when `retry`; whether it was accepted.
    async fn deliver(&mut self, path: &str, body: Vec<u8>, retry: bool) -> bool {
        let body = Bytes::from(body);
        let attempts = if retry { self.config.retries + 1 } else { 1 };
        for attempt in 0..attempts {
            let verdict = match tokio::time::timeout(
                self.config.request_timeout,
                self.client.post(path, body.clone()),
            )
            .await
            {
                Ok(Ok((status, retry_after))) => {
                    let v = classify(status, retry_after.as_deref());
                    if v != Verdict::Done {
                        self.state.error(format!("the collector answered {status} to {path}"));
                    }
                    v
                }
                Ok(Err(e)) => {
                    self.client.conn = None;
                    self.state.error(e);
                    Verdict::Retry(None)
                }
                Err(_) => {
                    self.client.conn = None;
                    self.state.error(format!(
                        "the collector did not answer within {} s",
                        self.config.request_timeout.as_secs_f64()
                    ));
                    Verdict::Retry(None)
                }
            };
            let wait = match verdict {
                Verdict::Done => return true,
                Verdict::Fail => return false,
                Verdict::Retry(after) => after.unwrap_or_else(|| {
                    backoff(self.config.first_backoff, self.config.max_backoff, attempt)
                }),
            };
            if attempt + 1 == attempts || *self.stop.borrow() {
                break;
            }
            let wait = wait.min(self.config.max_backoff);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.changed() => return false,
            }
        }
        false
    }
}

/// The most of a collector's answer read: an OTLP answer is an empty or a partial-success
/// message, a few bytes; past this the connection is dropped unread (red team, issue 35).
const MAX_ANSWER: usize = 64 * 1024;

/// A byte stream to the collector: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One HTTP/1.1 connection to the collector, made again when it breaks.
struct Client {
    config: ExporterConfig,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let e = &self.config.endpoint;
        let tcp = tokio::net::TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|err| format!("cannot connect to the collector {e}: {err}"))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = if e.tls {
            let config = self
                .config
                .tls
                .clone()
                .ok_or_else(|| format!("no TLS configuration for the collector {e}"))?;
            let name = rustls::pki_types::ServerName::try_from(e.host.clone())
                .map_err(|err| format!("collector name {:?}: {err}", e.host))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|err| format!("TLS with the collector {e}: {err}"))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|err| format!("HTTP with the collector {e}: {err}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }

    /// Posts one body; the status and `Retry-After`.
    async fn post(&mut self, path: &str, body: Bytes) -> Result<(u16, Option<String>), String> {
        let mut send = match self.conn.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.connect().await?,
        };
        send.ready().await.map_err(|e| format!("the collector's connection broke: {e}"))?;
        let e = &self.config.endpoint;
        let authority = if e.host.contains(':') {
            format!("[{}]:{}", e.host, e.port)
        } else {
            format!("{}:{}", e.host, e.port)
        };
        let mut req = hyper::Request::post(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .header(hyper::header::USER_AGENT, concat!("sandgate/", env!("CARGO_PKG_VERSION")));
        for (n, v) in &self.config.headers {
            req = req.header(n.as_str(), v.as_str());
        }
        let req = req.body(Full::new(body)).map_err(|e| format!("export request: {e}"))?;
        let resp = send.send_request(req).await.map_err(|e| format!("export to {path}: {e}"))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Read the (small) answer to the end so the connection can carry the next export; a
        // collector that answers more than OTLP ever does is not read on (its connection is
        // dropped), so it cannot make the daemon hold what it sends.
        let mut body = resp.into_body();
        let mut read = 0usize;
        let reusable = loop {
            match body.frame().await {
                None => break true,
                Some(Ok(f)) => {
                    read += f.data_ref().map_or(0, Bytes::len);
                    if read > MAX_ANSWER {
                        break false;
                    }
                }
                Some(Err(_)) => break false,
            }
        };
        if reusable {
            self.conn = Some(send);
        }
        Ok((status, retry_after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_otlp_http_says() {
        // (status, Retry-After, verdict)
        for (status, after, verdict) in [
            (200, None, Verdict::Done),
            (202, None, Verdict::Done),
            (429, Some("3"), Verdict::Retry(Some(Duration::from_secs(3)))),
            (429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), Verdict::Retry(None)),
            (502, None, Verdict::Retry(None)),
            (503, None, Verdict::Retry(None)),
            (504, None, Verdict::Retry(None)),
            (500, None, Verdict::Fail),
            (400, None, Verdict::Fail),
            (401, None, Verdict::Fail),
            (404, None, Verdict::Fail),
        ] {
            assert_eq!(classify(status, after), verdict, "{status}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let (first, max) = (Duration::from_millis(500), Duration::from_secs(30));
        let got: Vec<u64> = (0..9).map(|n| backoff(first, max, n).as_millis() as u64).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        assert_eq!(backoff(first, max, u32::MAX), max);
    }
}
