//! sandgate's OpenTelemetry export: the daemon's events as OTLP log records and its counters as
//! OTLP metrics, posted to a collector over HTTP (`/v1/logs`, `/v1/metrics`, protobuf bodies).
//!
//! - [`otlp`]: the records, resources and metrics as values, and their protobuf encoding (pure).
//! - [`Counters`]: the counters behind the metrics, atomics the daemon adds to on any thread.
//! - [`Telemetry`]: the exporter, a bounded queue in front of a task that batches, posts and
//!   retries; a collector that is down or slow costs only the records the queue cannot hold,
//!   counted.
//!
//! It does not decide what an event says (the daemon maps its events to records), read the
//! configuration files (the daemon passes [`ExporterConfig`]), or build TLS roots (the daemon
//! passes a rustls configuration with the system's roots and `extra_roots`).
//!
//! # Why hand-written protobuf
//!
//! Three ways to produce OTLP were measured against this workspace (issue 35; numbers in
//! `docs/performance.md`):
//!
//! - the `opentelemetry` SDK with `opentelemetry-otlp`: a second async runtime story, its own
//!   batch processor and HTTP client (reqwest or hyper), ~60 more crates; it also wants to own
//!   the pipeline (providers, global state) where the daemon already has one event bus;
//! - `opentelemetry-proto` with `prost` (tonic off): the generated message types, but the crate
//!   always builds the `opentelemetry` API and SDK crates as well, plus `prost`, `prost-derive`,
//!   `tonic` for its messages feature, and their trees;
//! - the encoding written here: the messages sandgate sends are a handful (resource, scope, log
//!   record, sum, histogram, any-value), the protobuf wire format for them is ~150 lines
//!   ([`wire`](crate::otlp)), and nothing new enters the shipped binary's dependency tree.
//!
//! The third was chosen; the OpenTelemetry project's crates are still the judge: every test
//! decodes what this crate writes with `opentelemetry-proto`'s generated types (a
//! dev-dependency only), so a wrong field number or wire type fails the tests, not a collector.

#![forbid(unsafe_code)]

mod export;
mod metrics;
pub mod otlp;
mod wire;

pub use export::{ExportStats, ExporterConfig, Telemetry};
pub use metrics::{ANSWER_BOUNDS, Counters, QuestionOutcome, RequestOutcome};
pub use otlp::{LogRecord, Resource, Severity, Value};
