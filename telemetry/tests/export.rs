//! The exporter against a test collector on 127.0.0.1 (`sandgate_test_support::otlp`), every
//! body decoded with the OpenTelemetry project's own generated types (`opentelemetry-proto`):
//! records and metrics arrive whole, and a collector that is down, hangs, or answers 500 or 429
//! costs the caller nothing but counted records.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prost::Message as _;
use sandgate_telemetry::otlp::{InstrumentationScope, encode_logs, encode_metrics};
use sandgate_telemetry::{
    Counters, ExporterConfig, LogRecord, QuestionOutcome, RequestOutcome, Resource, Severity,
    Telemetry, Value,
};
use sandgate_test_support::otlp::{Collector, CollectorReply, refused_endpoint};

mod common;
use common::{endpoint, runtime, wait_for};

const WAIT: Duration = Duration::from_secs(20);

fn resource(id: &str) -> Arc<Resource> {
    Arc::new(Resource {
        attributes: vec![("host.name", "h".into()), ("sandgate.sandbox.id", id.into())],
    })
}

fn record(i: u64, resource: &Arc<Resource>) -> LogRecord {
    LogRecord {
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + i),
        severity: if i.is_multiple_of(2) { Severity::Info } else { Severity::Warn },
        event_name: "sandgate.request",
        body: format!("record {i}"),
        attributes: vec![
            ("server.address", "example.org".into()),
            ("server.port", Value::Int(443)),
            ("sandgate.seq", i.into()),
            ("sandgate.ratio", Value::Double(0.5)),
            ("sandgate.lost", false.into()),
            ("process.command_args", Value::Array(vec!["curl".into(), "-v".into()])),
        ],
        resource: resource.clone(),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn config(url: &str) -> ExporterConfig {
    let mut c = ExporterConfig::new(endpoint(url), resource("base"));
    c.interval = Duration::from_secs(3600); // batches by size, or at stop
    c.max_batch = 4;
    c.request_timeout = Duration::from_millis(300);
    c.first_backoff = Duration::from_millis(10);
    c.max_backoff = Duration::from_millis(50);
    c
}

fn logs_of(body: &[u8]) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest::decode(body).expect("an OTLP logs request")
}

#[test]
fn records_decode_with_the_otlp_definitions_grouped_by_resource() {
    let (a, b) = (resource("sg-a"), resource("sg-b"));
    let records = [record(0, &a), record(1, &a), record(2, &b)];
    let scope = InstrumentationScope { name: "sandgate", version: "9.9" };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let req = logs_of(&encode_logs(&scope, &records, now));
    assert_eq!(req.resource_logs.len(), 2, "one per resource");
    let first = &req.resource_logs[0];
    let res = first.resource.as_ref().unwrap();
    assert_eq!(
        attr(&res.attributes, "sandgate.sandbox.id"),
        Some(&Any::StringValue("sg-a".into()))
    );
    let sl = &first.scope_logs[0];
    assert_eq!(
        sl.scope.as_ref().map(|s| (s.name.as_str(), s.version.as_str())),
        Some(("sandgate", "9.9"))
    );
    assert_eq!(sl.log_records.len(), 2);
    let r = &sl.log_records[1];
    assert_eq!(r.time_unix_nano, 1_700_000_001 * 1_000_000_000);
    assert_eq!(r.observed_time_unix_nano, 1_800_000_000 * 1_000_000_000);
    assert_eq!((r.severity_number, r.severity_text.as_str()), (13, "WARN"));
    assert_eq!(r.event_name, "sandgate.request");
    assert_eq!(
        r.body.as_ref().and_then(|b| b.value.clone()),
        Some(Any::StringValue("record 1".into()))
    );
    assert_eq!(attr(&r.attributes, "server.port"), Some(&Any::IntValue(443)));
    assert_eq!(attr(&r.attributes, "sandgate.seq"), Some(&Any::IntValue(1)));
    assert_eq!(attr(&r.attributes, "sandgate.ratio"), Some(&Any::DoubleValue(0.5)));
    assert_eq!(attr(&r.attributes, "sandgate.lost"), Some(&Any::BoolValue(false)));
    let Some(Any::ArrayValue(args)) = attr(&r.attributes, "process.command_args") else {
        panic!("no array")
    };
    let args: Vec<_> = args.values.iter().filter_map(|v| v.value.clone()).collect();
    assert_eq!(args, [Any::StringValue("curl".into()), Any::StringValue("-v".into())]);
    assert_eq!(sl.log_records[0].severity_number, 9, "INFO");
    let second = &req.resource_logs[1];
    assert_eq!(
        attr(&second.resource.as_ref().unwrap().attributes, "sandgate.sandbox.id"),
        Some(&Any::StringValue("sg-b".into()))
    );
}

#[test]
fn metrics_decode_with_the_otlp_definitions() {
    let c = Counters::default();
    c.requests(RequestOutcome::Allow, 3);
    c.requests(RequestOutcome::Deny, 2);
    c.question(QuestionOutcome::Asked);
    c.question(QuestionOutcome::Allow);
    c.answered_after(Duration::from_millis(1500));
    c.blocked_packets(7);
    c.secrets_injected(4);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(160);
    let scope = InstrumentationScope { name: "sandgate", version: "1" };
    let body = encode_metrics(&resource("base"), &scope, &c.snapshot(), start, now);
    let req = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
    let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
    let sum = |name: &str, key: Option<(&str, &str)>| -> i64 {
        let m = metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("{name}"));
        let Some(Data::Sum(s)) = &m.data else { panic!("{name} is not a sum") };
        assert!(s.is_monotonic && s.aggregation_temporality == 2, "{name}: cumulative counter");
        let p = s
            .data_points
            .iter()
            .find(|p| {
                key.is_none_or(|(k, v)| attr(&p.attributes, k) == Some(&Any::StringValue(v.into())))
            })
            .unwrap();
        assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (100_000_000_000, 160_000_000_000));
        match p.value {
            Some(Number::AsInt(n)) => n,
            ref other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(sum("sandgate.requests", Some(("sandgate.decision", "allow"))), 3);
    assert_eq!(sum("sandgate.requests", Some(("sandgate.decision", "deny"))), 2);
    assert_eq!(
        sum("sandgate.requests", Some(("sandgate.decision", "reject"))),
        0,
        "zero is a value"
    );
    assert_eq!(sum("sandgate.questions", Some(("sandgate.question.outcome", "asked"))), 1);
    assert_eq!(sum("sandgate.questions", Some(("sandgate.question.outcome", "allowed"))), 1);
    assert_eq!(sum("sandgate.blocked_packets", None), 7);
    assert_eq!(sum("sandgate.secrets.injected", None), 4);
    assert_eq!(sum("sandgate.telemetry.dropped", None), 0);
    let h = metrics.iter().find(|m| m.name == "sandgate.question.answer.duration").unwrap();
    assert_eq!(h.unit, "s");
    let Some(Data::Histogram(h)) = &h.data else { panic!("not a histogram") };
    let p = &h.data_points[0];
    assert_eq!((p.count, p.sum), (1, Some(1.5)));
    assert_eq!(p.explicit_bounds, sandgate_telemetry::ANSWER_BOUNDS);
    assert_eq!(p.bucket_counts, [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn records_reach_the_collector_in_batches_with_the_headers_and_stop_sends_the_rest() {
    let rt = runtime();
    let collector = Collector::start();
    let mut c = config(&collector.endpoint());
    c.headers = vec![("authorization".into(), "Bearer t0ken".into())];
    let t = Telemetry::start(c, rt.handle());
    let r = resource("sg-1");
    for i in 0..6 {
        assert!(t.log(record(i, &r)));
    }
    // A full batch (4) goes at once; the other 2 wait for the interval, or the stop.
    let first = collector.next(WAIT).expect("the first batch");
    assert_eq!(first.path, "/v1/logs");
    assert_eq!(first.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(first.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(logs_of(&first.body).resource_logs[0].scope_logs[0].log_records.len(), 4);
    rt.block_on(t.stop(WAIT));
    let rest = collector.next(WAIT).expect("the rest, at the stop");
    assert_eq!(rest.path, "/v1/logs");
    let rest = logs_of(&rest.body);
    let bodies: Vec<_> = rest.resource_logs[0].scope_logs[0]
        .log_records
        .iter()
        .map(|r| r.body.clone().and_then(|b| b.value))
        .collect();
    assert_eq!(
        bodies,
        [Some(Any::StringValue("record 4".into())), Some(Any::StringValue("record 5".into()))]
    );
    let metrics = collector.next(WAIT).expect("the counters, at the stop");
    assert_eq!(metrics.path, "/v1/metrics");
    ExportMetricsServiceRequest::decode(metrics.body.as_slice()).unwrap();
    let st = t.stats();
    assert_eq!((st.exported, st.dropped, st.failed, st.metric_exports), (6, 0, 0, 1), "{st:?}");
}

#[test]
fn a_collector_that_is_down_costs_the_caller_only_the_dropped_count() {
    let rt = runtime();
    let mut c = config(&refused_endpoint());
    c.queue = 8;
    c.retries = 1_000; // keeps retrying: the queue fills
    let t = Telemetry::start(c, rt.handle());
    let r = resource("sg-1");
    let started = Instant::now();
    let sent = (0..2_000).filter(|i| t.log(record(*i, &r))).count() as u64;
    let took = started.elapsed();
    // 2,000 calls with a dead collector: each a try_send, never a connect.
    assert!(took < Duration::from_millis(200), "logging took {took:?}");
    wait_for("a failed attempt", || t.stats().last_error.is_some());
    let st = t.stats();
    assert_eq!(st.dropped, 2_000 - sent, "{st:?}");
    assert!(st.dropped >= 2_000 - 8 - 4, "{st:?}");
    assert!(st.last_error.as_deref().unwrap().contains("cannot connect"), "{st:?}");
    assert_eq!(st.exported, 0);
    rt.block_on(t.stop(Duration::from_secs(5)));
}

#[test]
fn a_collector_that_hangs_is_timed_out_and_retried_while_logging_goes_on() {
    let rt = runtime();
    let collector = Collector::scripted(&[CollectorReply::Hang], CollectorReply::Status(200));
    let mut c = config(&collector.endpoint());
    c.queue = 8;
    // Long enough that the logging below happens while the first attempt hangs, on a busy
    // machine too.
    c.request_timeout = Duration::from_secs(2);
    let t = Telemetry::start(c, rt.handle());
    let r = resource("sg-1");
    for i in 0..4 {
        t.log(record(i, &r));
    }
    // The first attempt hangs; while it does, logging never waits and the overflow is counted.
    collector.next(WAIT).expect("the first attempt");
    let started = Instant::now();
    for i in 4..100 {
        t.log(record(i, &r));
    }
    assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
    assert!(t.stats().dropped >= 96 - 8, "{:?}", t.stats());
    // After the request time-out the same batch is sent again, on a new connection, and taken.
    let again = collector.next(WAIT).expect("the retry");
    assert_eq!(logs_of(&again.body).resource_logs[0].scope_logs[0].log_records.len(), 4);
    wait_for("the retried batch counted", || t.stats().exported >= 4);
    assert!(t.stats().last_error.unwrap().contains("did not answer"), "{:?}", t.stats());
    rt.block_on(t.stop(Duration::from_secs(5)));
}

#[test]
fn a_500_drops_the_batch_and_a_429_or_503_is_retried() {
    let rt = runtime();
    // Batch 1: 500, not retried (failed). Batch 2: 429 with Retry-After 0, then 503, then taken.
    let collector = Collector::scripted(
        &[
            CollectorReply::Status(500),
            CollectorReply::RetryAfter(429, 0),
            CollectorReply::Status(503),
        ],
        CollectorReply::Status(200),
    );
    let t = Telemetry::start(config(&collector.endpoint()), rt.handle());
    let r = resource("sg-1");
    for i in 0..4 {
        t.log(record(i, &r));
    }
    collector.next(WAIT).expect("batch 1");
    wait_for("batch 1 given up", || t.stats().failed == 4);
    for i in 4..8 {
        t.log(record(i, &r));
    }
    for attempt in 1..=3 {
        let e = collector.next(WAIT).unwrap_or_else(|| panic!("batch 2, attempt {attempt}"));
        let seq = &logs_of(&e.body).resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(
            attr(&seq.attributes, "sandgate.seq"),
            Some(&Any::IntValue(4)),
            "attempt {attempt}"
        );
    }
    wait_for("batch 2 taken", || t.stats().exported == 4);
    let st = t.stats();
    assert_eq!((st.failed, st.dropped, collector.requests()), (4, 0, 4), "{st:?}");
    rt.block_on(t.stop(Duration::from_secs(5)));
}
