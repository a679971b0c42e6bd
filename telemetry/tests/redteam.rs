//! Red team of the exporter (issue 35, part 2): collectors that misbehave on purpose — one that
//! answers without end, redirects, trickles its answer, holds the TLS handshake, or never reads
//! — and records an agent made huge. Each costs the daemon nothing but counted records: no
//! memory held past a bound, no connection anywhere but the configured collector, no wait
//! past the request time-out. Every collector is on 127.0.0.1.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use sandgate_telemetry::otlp::{MAX_ARRAY_VALUES, MAX_VALUE_BYTES};
use sandgate_telemetry::{ExporterConfig, LogRecord, Resource, Severity, Telemetry, Value};
use sandgate_test_support::otlp::Collector;

mod common;
use common::{endpoint, runtime, wait_for};

const WAIT: Duration = Duration::from_secs(20);

fn resource() -> Arc<Resource> {
    Arc::new(Resource { attributes: vec![("host.name", "h".into())] })
}

fn record(i: u64, body: String) -> LogRecord {
    LogRecord {
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + i),
        severity: Severity::Warn,
        event_name: "sandgate.request",
        body,
        attributes: vec![("sandgate.seq", i.into())],
        resource: resource(),
    }
}

fn config(url: &str) -> ExporterConfig {
    let mut c = ExporterConfig::new(endpoint(url), resource());
    c.interval = Duration::from_secs(3600); // batches by size, or at stop
    c.max_batch = 4;
    c.request_timeout = Duration::from_secs(1);
    c.first_backoff = Duration::from_millis(10);
    c.max_backoff = Duration::from_millis(50);
    c
}

/// A listener on 127.0.0.1 handing each connection, with its number (0-based), to `serve` on a
/// thread of its own; `http://ADDR` and the count of connections accepted.
fn listener(
    serve: impl Fn(usize, TcpStream) + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (serve, n) = (Arc::new(serve), accepted.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            let i = n.fetch_add(1, Ordering::SeqCst);
            let serve = serve.clone();
            std::thread::spawn(move || serve(i, conn));
        }
    });
    (format!("http://{addr}"), accepted)
}

/// Reads one request (head and `Content-Length` body); `false` at the end of the stream.
fn read_request(r: &mut BufReader<TcpStream>) -> bool {
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        if line == "\r\n" {
            break;
        }
        if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).is_ok()
}

/// Answers every request on `conn` with 200 and an empty body.
fn answer_200(conn: TcpStream) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    while read_request(&mut r) {
        if out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// A collector that answers 200 with a body of 1 GiB and writes it as fast as it is read:
/// the exporter reads at most a small answer and drops the connection, so the collector's
/// writes stop within a few socket buffers. Before the bound the exporter collected the whole
/// body into memory (all of the 256 MiB the collector here writes at most).
#[test]
fn a_collector_that_answers_without_end_is_not_read_on() {
    const CHUNK: usize = 1 << 20;
    const MOST: usize = 256 << 20;
    let (tx, rx) = mpsc::channel::<usize>();
    let tx = Mutex::new(tx);
    let (url, _) = listener(move |_, conn| {
        let mut out = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        if !read_request(&mut r) {
            return;
        }
        // Only what makes the peer stop reading ends this: a reset, a close, or a stall.
        out.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
        let mut written = 0;
        if out.write_all(head.as_bytes()).is_ok() {
            let chunk = vec![b'x'; CHUNK];
            while written < MOST && out.write_all(&chunk).is_ok() {
                written += CHUNK;
            }
        }
        let _ = tx.lock().unwrap().send(written);
    });
    let rt = runtime();
    let mut c = config(&url);
    c.request_timeout = Duration::from_secs(60); // the time-out is not what saves it
    c.retries = 0;
    let t = Telemetry::start(c, rt.handle());
    for i in 0..4 {
        assert!(t.log(record(i, format!("record {i}"))));
    }
    let written = rx.recv_timeout(Duration::from_secs(120)).expect("the collector's answer");
    assert!(written < 32 * CHUNK, "the exporter read {} MiB of the answer", written / CHUNK);
    wait_for("the batch counted", || t.stats().exported == 4);
    rt.block_on(t.stop(Duration::from_secs(5)));
}

/// A collector that answers 301, 302, 307 or 308 with a `Location` elsewhere: the batch is given
/// up (counted as failed), never sent where the answer points. The control: the same exporter
/// pointed at that place does connect there.
#[test]
fn a_redirect_is_never_followed() {
    let (elsewhere, reached) = listener(|_, conn| answer_200(conn));
    for status in [301, 302, 307, 308] {
        let location = format!("{elsewhere}/v1/logs");
        let (url, asked) = listener(move |_, conn| {
            let mut out = conn.try_clone().unwrap();
            let mut r = BufReader::new(conn);
            while read_request(&mut r) {
                let resp = format!(
                    "HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
                );
                if out.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
        });
        let rt = runtime();
        let t = Telemetry::start(config(&url), rt.handle());
        for i in 0..4 {
            t.log(record(i, "r".into()));
        }
        wait_for("the batch given up", || t.stats().failed == 4);
        let st = t.stats();
        assert!(st.last_error.as_deref().unwrap_or("").contains(&status.to_string()), "{st:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 1, "{status}: one connection, not retried");
        assert_eq!(reached.load(Ordering::SeqCst), 0, "{status} was followed");
    }
    // The control: the place the redirects named counts a connection when it is the endpoint.
    let rt = runtime();
    let t = Telemetry::start(config(&elsewhere), rt.handle());
    for i in 0..4 {
        t.log(record(i, "r".into()));
    }
    wait_for("the control's batch taken", || t.stats().exported == 4);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
}

/// A collector that sends its answer's head at once and then its body a byte at a time: the
/// request time-out covers the answer's body too; the batch goes again on a new connection, and
/// logging never waits meanwhile.
#[test]
fn a_collector_that_trickles_its_answer_is_cut_off_at_the_time_out() {
    let (url, accepted) = listener(|i, conn| {
        if i > 0 {
            return answer_200(conn);
        }
        let mut out = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        if !read_request(&mut r) {
            return;
        }
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
        // A byte every 50 ms: 100,000 of them would take 80 minutes.
        while out.write_all(b"x").is_ok() {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let rt = runtime();
    let mut c = config(&url);
    c.queue = 8;
    let t = Telemetry::start(c, rt.handle());
    for i in 0..4 {
        t.log(record(i, "r".into()));
    }
    wait_for("the first connection", || accepted.load(Ordering::SeqCst) >= 1);
    let started = Instant::now();
    let refused = (4..1000).filter(|i| !t.log(record(*i, "r".into()))).count() as u64;
    assert!(started.elapsed() < Duration::from_millis(200), "{:?}", started.elapsed());
    wait_for("the batch taken on a new connection", || t.stats().exported >= 4);
    let st = t.stats();
    assert!(st.last_error.as_deref().unwrap_or("").contains("did not answer"), "{st:?}");
    assert_eq!(st.dropped, refused, "every refused record is counted, no other: {st:?}");
    rt.block_on(t.stop(Duration::from_secs(5)));
}

/// An `https` collector that takes the connection and never answers the TLS hello: the request
/// time-out covers the handshake, the attempt is retried on a new connection, and a stop returns
/// within its patience while the collector still holds it.
#[test]
fn a_collector_that_holds_the_tls_handshake_is_timed_out() {
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    let (url, accepted) = listener(move |_, conn| keep.lock().unwrap().push(conn));
    let url = url.replace("http://", "https://");
    let rt = runtime();
    let mut c = config(&url);
    c.request_timeout = Duration::from_millis(300);
    c.retries = 1_000;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    c.tls = Some(Arc::new(tls));
    let t = Telemetry::start(c, rt.handle());
    for i in 0..4 {
        t.log(record(i, "r".into()));
    }
    wait_for("a second handshake", || accepted.load(Ordering::SeqCst) >= 2);
    let st = t.stats();
    assert!(st.last_error.as_deref().unwrap_or("").contains("did not answer"), "{st:?}");
    assert_eq!((st.exported, st.failed), (0, 0), "{st:?}");
    let started = Instant::now();
    rt.block_on(t.stop(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(2), "stop took {:?}", started.elapsed());
}

/// A collector that accepts and never reads: the exporter's write stalls once the socket's
/// buffers are full, and is cut off at the request time-out; logging 20,000 records meanwhile
/// never waits, and the dropped count is exactly the records `log` refused.
#[test]
fn a_collector_that_never_reads_costs_only_the_dropped_count() {
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    let (url, accepted) = listener(move |_, conn| keep.lock().unwrap().push(conn));
    let rt = runtime();
    let mut c = config(&url);
    c.max_batch = 512;
    c.queue = 1024;
    let t = Telemetry::start(c, rt.handle());
    let big = "y".repeat(MAX_VALUE_BYTES - 8);
    let started = Instant::now();
    let refused = (0..20_000).filter(|i| !t.log(record(*i, big.clone()))).count() as u64;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "logging took {took:?}");
    wait_for("the collector's connection", || accepted.load(Ordering::SeqCst) >= 1);
    wait_for("the stalled attempt timed out", || {
        t.stats().last_error.is_some_and(|e| e.contains("did not answer"))
    });
    let st = t.stats();
    assert_eq!(st.dropped, refused, "{st:?}");
    assert!(refused >= 20_000 - 1024 - 512, "{st:?}");
    assert_eq!(st.exported, 0, "{st:?}");
    let started = Instant::now();
    rt.block_on(t.stop(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(2), "stop took {:?}", started.elapsed());
}

/// Strings an agent controls (a 64 KiB name, a 1 MiB line, 10,000 arguments) are cut to
/// [`MAX_VALUE_BYTES`] and [`MAX_ARRAY_VALUES`] before the queue, so 4,096 queued records stay
/// bounded; the control: a short value in the same record arrives as it was.
#[test]
fn an_agents_huge_strings_are_cut_before_the_queue() {
    let rt = runtime();
    let collector = Collector::start();
    let t = Telemetry::start(config(&collector.endpoint()), rt.handle());
    let mut r = record(0, "é".repeat(1 << 19)); // 1 MiB, two bytes a character
    r.attributes.push(("server.address", "h".repeat(64 << 10).into()));
    r.attributes.push((
        "process.command_args",
        Value::Array((0..10_000).map(|i| Value::from(format!("a{i}"))).collect()),
    ));
    r.attributes.push(("sandgate.rule", "short".into()));
    t.log(r);
    rt.block_on(t.stop(WAIT));
    let e = collector.next(WAIT).expect("the record");
    assert_eq!(e.path, "/v1/logs");
    assert!(e.body.len() < 4 * MAX_VALUE_BYTES, "{} bytes", e.body.len());
    let req = ExportLogsServiceRequest::decode(e.body.as_slice()).unwrap();
    let got = &req.resource_logs[0].scope_logs[0].log_records[0];
    let Some(Any::StringValue(body)) = got.body.clone().and_then(|b| b.value) else { panic!() };
    assert!(body.len() <= MAX_VALUE_BYTES && body.ends_with('…'), "{}", body.len());
    assert!(body.trim_end_matches('…').chars().all(|c| c == 'é'), "cut inside a character");
    let value = |key: &str| {
        got.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()?.value)
    };
    let Some(Any::StringValue(host)) = value("server.address") else { panic!() };
    assert_eq!(host.len(), MAX_VALUE_BYTES);
    let Some(Any::ArrayValue(args)) = value("process.command_args") else { panic!() };
    assert_eq!(args.values.len(), MAX_ARRAY_VALUES);
    assert_eq!(value("sandgate.rule"), Some(Any::StringValue("short".into())));
}
