//! OTLP's messages for logs and metrics, as values, and their protobuf encoding: the bodies of
//! `POST /v1/logs` (`ExportLogsServiceRequest`) and `POST /v1/metrics`
//! (`ExportMetricsServiceRequest`). Pure: bytes in memory, no I/O.
//!
//! Field numbers are those of `opentelemetry/proto/{common,resource,logs,metrics}/v1/*.proto`
//! and `collector/{logs,metrics}/v1/*_service.proto`; the tests decode what is written here with
//! the OpenTelemetry project's own generated types (`opentelemetry-proto`), so a wrong number or
//! wire type fails them.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::wire;

/// An attribute's value (OTLP's `AnyValue`, the kinds used here).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `string_value`.
    Str(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `array_value`.
    Array(Vec<Value>),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Int(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// Attributes: keys (semantic-convention names, or `sandgate.*`) and values.
pub type Attributes = Vec<(&'static str, Value)>;

/// What produced the telemetry (OTLP's `Resource`): the host, the user, a sandbox.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resource {
    /// Its attributes.
    pub attributes: Attributes,
}

/// A log record's severity (OTLP's `SeverityNumber`, the two used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// `SEVERITY_NUMBER_INFO` (9): something was let through, asked, answered, started.
    Info,
    /// `SEVERITY_NUMBER_WARN` (13): something was refused or blocked.
    Warn,
}

impl Severity {
    fn number(self) -> u64 {
        match self {
            Severity::Info => 9,
            Severity::Warn => 13,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
        }
    }
}

/// One event as a log record.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    /// When it happened.
    pub time: SystemTime,
    /// How serious.
    pub severity: Severity,
    /// What kind of event (`sandgate.request`, ...): OTLP's `event_name`.
    pub event_name: &'static str,
    /// The line a person reads.
    pub body: String,
    /// Its attributes.
    pub attributes: Attributes,
    /// Who produced it; records of one resource (the same `Arc`) are sent together.
    pub resource: Arc<Resource>,
}

/// The most bytes of one string in a record (the body, an attribute's value), and the most
/// values of one array: a longer one is cut, with `…` at the end. The daemon bounds what it puts
/// in events (a host name, a path, a hook's reason), but a record is held in the queue and sent
/// whatever its source, so the exporter bounds it too: 4,096 queued records stay a few tens of
/// MiB at worst, whatever an agent writes in a request line or a hook (red team, issue 35).
pub const MAX_VALUE_BYTES: usize = 4096;
/// See [`MAX_VALUE_BYTES`].
pub const MAX_ARRAY_VALUES: usize = 128;

fn bound_str(s: &mut String) {
    if s.len() > MAX_VALUE_BYTES {
        let mut end = MAX_VALUE_BYTES - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

fn bound_value(v: &mut Value) {
    match v {
        Value::Str(s) => bound_str(s),
        Value::Array(a) => {
            a.truncate(MAX_ARRAY_VALUES);
            a.iter_mut().for_each(bound_value);
        }
        Value::Bool(_) | Value::Int(_) | Value::Double(_) => {}
    }
}

impl LogRecord {
    /// Cuts the body and the attributes' values to [`MAX_VALUE_BYTES`] and
    /// [`MAX_ARRAY_VALUES`] (the resource is the daemon's, shared by records, and bounded
    /// there).
    pub(crate) fn bound(&mut self) {
        bound_str(&mut self.body);
        self.attributes.iter_mut().for_each(|(_, v)| bound_value(v));
    }
}

/// The instrumentation scope every record and metric is sent under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstrumentationScope {
    /// Its name (`sandgate`).
    pub name: &'static str,
    /// Its version.
    pub version: &'static str,
}

/// A metric (cumulative since `start`).
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// Its name (`sandgate.requests`).
    pub name: &'static str,
    /// One line on what it counts.
    pub description: &'static str,
    /// Its unit (UCUM: `{request}`, `s`).
    pub unit: &'static str,
    /// Its points.
    pub data: MetricData,
}

/// A metric's kind and points.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricData {
    /// A monotonic cumulative sum (a counter).
    Counter(Vec<NumberPoint>),
    /// A cumulative histogram.
    Histogram(Vec<HistogramPoint>),
}

/// One counter's value for one set of attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct NumberPoint {
    /// Its attributes.
    pub attributes: Attributes,
    /// The count.
    pub value: u64,
}

/// One histogram's buckets for one set of attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramPoint {
    /// Its attributes.
    pub attributes: Attributes,
    /// Values counted.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The buckets' upper bounds (inclusive), increasing.
    pub bounds: Vec<f64>,
    /// Values per bucket: one more than `bounds` (the last is above every bound).
    pub buckets: Vec<u64>,
}

/// Nanoseconds since the epoch (0 for a time before it).
pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: u64 = 2;

fn any_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => wire::bytes_present(out, 1, s.as_bytes()),
        Value::Bool(b) => wire::bool_present(out, 2, *b),
        Value::Int(n) => wire::int_present(out, 3, *n),
        Value::Double(d) => wire::double_present(out, 4, *d),
        Value::Array(items) => wire::message(out, 5, |a| {
            for item in items {
                wire::message(a, 1, |o| any_value(o, item));
            }
        }),
    }
}

fn attributes(out: &mut Vec<u8>, field: u32, attrs: &Attributes) {
    for (k, v) in attrs {
        wire::message(out, field, |kv| {
            wire::string(kv, 1, k);
            wire::message(kv, 2, |o| any_value(o, v));
        });
    }
}

fn scope(out: &mut Vec<u8>, s: &InstrumentationScope) {
    wire::message(out, 1, |o| {
        wire::string(o, 1, s.name);
        wire::string(o, 2, s.version);
    });
}

fn log_record(out: &mut Vec<u8>, r: &LogRecord, observed: u64) {
    wire::fixed64(out, 1, unix_nanos(r.time));
    wire::uint(out, 2, r.severity.number());
    wire::string(out, 3, r.severity.text());
    wire::message(out, 5, |o| any_value(o, &Value::Str(r.body.clone())));
    attributes(out, 6, &r.attributes);
    wire::fixed64(out, 11, observed);
    wire::string(out, 12, r.event_name);
}

/// The body of `POST /v1/logs`: `records` grouped by resource (consecutive records of the same
/// resource share one `ResourceLogs`), observed at `now`.
pub fn encode_logs(
    scope_: &InstrumentationScope,
    records: &[LogRecord],
    now: SystemTime,
) -> Vec<u8> {
    let observed = unix_nanos(now);
    let mut out = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let resource = &records[start].resource;
        let end = records[start..]
            .iter()
            .position(|r| !Arc::ptr_eq(&r.resource, resource) && *r.resource != **resource)
            .map_or(records.len(), |n| start + n);
        wire::message(&mut out, 1, |rl| {
            wire::message(rl, 1, |res| attributes(res, 1, &resource.attributes));
            wire::message(rl, 2, |sl| {
                scope(sl, scope_);
                for r in &records[start..end] {
                    wire::message(sl, 2, |o| log_record(o, r, observed));
                }
            });
        });
        start = end;
    }
    out
}

/// The body of `POST /v1/metrics`: `metrics` of `resource`, cumulative from `start` to `now`.
pub fn encode_metrics(
    resource: &Resource,
    scope_: &InstrumentationScope,
    metrics: &[Metric],
    start: SystemTime,
    now: SystemTime,
) -> Vec<u8> {
    let (start, now) = (unix_nanos(start), unix_nanos(now));
    let mut out = Vec::new();
    wire::message(&mut out, 1, |rm| {
        wire::message(rm, 1, |res| attributes(res, 1, &resource.attributes));
        wire::message(rm, 2, |sm| {
            scope(sm, scope_);
            for m in metrics {
                wire::message(sm, 2, |o| metric(o, m, start, now));
            }
        });
    });
    out
}

fn metric(out: &mut Vec<u8>, m: &Metric, start: u64, now: u64) {
    wire::string(out, 1, m.name);
    wire::string(out, 2, m.description);
    wire::string(out, 3, m.unit);
    match &m.data {
        MetricData::Counter(points) => wire::message(out, 7, |sum| {
            for p in points {
                wire::message(sum, 1, |dp| {
                    wire::fixed64(dp, 2, start);
                    wire::fixed64(dp, 3, now);
                    // `as_int`: an sfixed64 in a oneof (a zero count is still a value).
                    wire::fixed64_present(dp, 6, p.value);
                    attributes(dp, 7, &p.attributes);
                });
            }
            wire::uint(sum, 2, CUMULATIVE);
            wire::uint(sum, 3, 1);
        }),
        MetricData::Histogram(points) => wire::message(out, 9, |h| {
            for p in points {
                wire::message(h, 1, |dp| {
                    wire::fixed64(dp, 2, start);
                    wire::fixed64(dp, 3, now);
                    wire::fixed64(dp, 4, p.count);
                    wire::double_present(dp, 5, p.sum);
                    wire::packed_fixed64(dp, 6, &p.buckets);
                    wire::packed_double(dp, 7, &p.bounds);
                    attributes(dp, 9, &p.attributes);
                });
            }
            wire::uint(h, 2, CUMULATIVE);
        }),
    }
}
