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
//! Three ways to produce OTLP were measured against this workspace (issue 35; `cargo tree` of
//! the `sandgate` binary, 2026-12-06; more in `docs/performance.md`):
//!
//! | way | crates new to the binary's tree |
//! |---|---|
//! | the SDK: `opentelemetry`, `opentelemetry_sdk`, `opentelemetry-otlp` (`http-proto`, `hyper-client`) | 14: the three, `opentelemetry-http`, `opentelemetry-proto`, `prost`, `prost-derive`, `tonic`, `tonic-prost`, `tokio-stream`, `async-trait`, `itertools`, `rand_chacha`, `ppv-lite86` |
//! | `opentelemetry-proto` 0.33 (`gen-tonic-messages`, `logs`, `metrics`; tonic off) | 5: it, `prost`, `prost-derive`, and the `opentelemetry` and `opentelemetry_sdk` crates, which it always builds for its conversions |
//! | the encoding here | 0 |
//!
//! The SDK also wants to own the pipeline (providers, its batch processor, global state) where
//! the daemon already has one event bus and one queue discipline. `opentelemetry-proto` would be
//! the wire format only, but ships the SDK with it. What sandgate sends is a handful of messages
//! (resource, scope, log record, sum, histogram, any-value); their wire format is ~150 lines
//! (`wire.rs`) plus the field numbers (`otlp.rs`). So the encoding is written here, and the
//! OpenTelemetry project's crates are its judge: every test decodes what this crate writes with
//! `opentelemetry-proto`'s generated types (a dev-dependency only), so a wrong field number or
//! wire type fails the tests, not a collector. Moving to `opentelemetry-proto` later is a change
//! behind [`otlp::encode_logs`] and [`otlp::encode_metrics`] alone.

#![forbid(unsafe_code)]

mod export;
mod metrics;
pub mod otlp;
mod wire;

pub use export::{ExportStats, ExporterConfig, Telemetry};
pub use metrics::{ANSWER_BOUNDS, Counters, QuestionOutcome, RequestOutcome};
pub use otlp::{LogRecord, Resource, Severity, Value};
