//! Issue 35, part 2: a real daemon exports a sandboxed run's events (a request let through with
//! a secret injected, a refused one, a blocked packet, the sandbox's start and end) to a test
//! collector on 127.0.0.1, every body decoded with the OpenTelemetry project's own types; and no
//! secret — the injected credential, the upstream proxy's credentials, the Telegram token, the
//! `[telemetry] headers` — is in any exported byte, in plain, base64 or percent-encoded form.
//! The control: a marker the test leaks on purpose (in the sandbox's command line, which is
//! exported) is found by the same search.

use std::collections::BTreeSet;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prost::Message as _;
use sandgate_test_support::otlp::{Collector, ReceivedExport};

use crate::support::daemon::{DaemonEnv, can_sandbox, start_daemon};
use crate::support::intercept::tls_origin;
use crate::support::sandbox::{HOST4, TestHost};
use sandgate_tests::skip_unless;

fn attr(attrs: &[KeyValue], key: &str) -> Option<Any> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()?.value)
}

fn text(v: Option<Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s,
        Some(Any::IntValue(n)) => n.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The forms a secret could be written in: as is, base64 (standard and URL-safe, with and
/// without padding, also of `Bearer VALUE`), percent-encoded, hex.
fn forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

    let mut out = vec![secret.to_owned()];
    for s in [secret.to_owned(), format!("Bearer {secret}")] {
        for e in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
            out.push(e.encode(&s));
        }
    }
    let pct: String = secret
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    out.push(pct);
    // Hex, both cases (red team: an encoder that hex-dumps a value would show it so).
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    out.push(hex.to_ascii_uppercase());
    out.push(hex);
    out
}

/// Where any form of `secret` occurs in `bytes`.
fn found(bytes: &[u8], secret: &str) -> Vec<String> {
    forms(secret)
        .into_iter()
        .filter(|f| bytes.windows(f.len()).any(|w| w == f.as_bytes()))
        .collect()
}

#[test]
fn a_sandboxed_runs_events_reach_the_collector_and_no_secret_does() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let unique = format!("{}{}", std::process::id(), nanos.as_nanos());
    // Characters base64 and percent-encoding change, so each form is a different string.
    let secret = format!("sk+live/{unique}=");
    let header = format!("hdr-{unique}+/=");
    let token = format!("{}:tg-{unique}", 123_456);
    let proxy_auth = format!("corp:pw-{unique}+/");
    let marker = format!("LEAK-CONTROL-{unique}");

    let Some(_host) = TestHost::start() else { return };
    let collector = Collector::start();
    let origin = tls_origin("127.0.0.1", &secret);
    let no = sandgate_tests::origin("never\n");
    let t = DaemonEnv::new("");
    let root = t.env.root.path();
    let key = root.join("key");
    std::fs::write(&key, format!("{secret}\n")).unwrap();
    let ca = root.join("ca.pem");
    std::fs::write(&ca, &origin.ca_pem).unwrap();
    let creds = root.join("proxy-creds");
    std::fs::write(&creds, format!("{proxy_auth}\n")).unwrap();
    let p = origin.port;
    let config = format!(
        r#"[daemon]
ask_timeout = "1s"

[network]
allow = ["127.0.0.1:{p}"]
deny = ["127.0.0.1:{no}"]

[proxy]
upstream = "http://127.0.0.1:9"
upstream_bypass = ["127.0.0.1"]
upstream_credentials = "file:{creds}"

[telegram]
token = "{token}"
chats = [1]
api_url = "http://127.0.0.1:9"

[[secrets]]
name = "testkey"
hosts = ["127.0.0.1:{p}"]
header = "Authorization"
format = "Bearer {{}}"
env = "TEST_API_KEY"
from_file = "{key}"

[tls]
extra_roots = ["{ca}"]

[telemetry]
otlp_endpoint = "{endpoint}"
headers = {{ authorization = "{header}" }}
interval = "100ms"
"#,
        key = key.display(),
        ca = ca.display(),
        creds = creds.display(),
        endpoint = collector.endpoint(),
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), &config).unwrap();
    start_daemon(&t);
    let curl = "curl -sS --max-time 10 --noproxy '' -x http://127.0.0.1:3128";
    let script = format!(
        "echo {marker} >/dev/null; \
         {curl} -o /dev/null -H \"Authorization: Bearer $TEST_API_KEY\" https://127.0.0.1:{p}/echo/a; \
         {curl} -o /dev/null http://127.0.0.1:{no}/ || true; \
         python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry: s.sendto(b'x', ('{HOST4}', 8080))\nexcept OSError: pass\""
    );
    let out =
        t.cmd().args(["net", "--report-blocked", "--", "sh", "-c", &script]).output().unwrap();
    let all = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");

    // Records until the sandbox's end has been exported (the interval is 100 ms).
    let mut exports: Vec<ReceivedExport> = Vec::new();
    let mut names = BTreeSet::new();
    let mut records = Vec::new();
    while !names.contains("sandgate.sandbox.ended") {
        let e = collector.next(Duration::from_secs(30)).unwrap_or_else(|| {
            panic!("no sandbox.ended record; saw {names:?}; status {}", t.status())
        });
        if e.path == "/v1/logs" {
            let req = ExportLogsServiceRequest::decode(e.body.as_slice()).expect("OTLP logs");
            for rl in req.resource_logs {
                let res = rl.resource.clone().unwrap_or_default().attributes;
                for sl in rl.scope_logs {
                    for r in sl.log_records {
                        names.insert(r.event_name.clone());
                        records.push((res.clone(), r));
                    }
                }
            }
        } else {
            assert_eq!(e.path, "/v1/metrics");
            ExportMetricsServiceRequest::decode(e.body.as_slice()).expect("OTLP metrics");
        }
        exports.push(e);
    }
    for name in ["sandgate.sandbox.started", "sandgate.request", "sandgate.blocked_packet"] {
        assert!(names.contains(name), "{name} missing: {names:?}");
    }
    let requests: Vec<_> =
        records.iter().filter(|(_, r)| r.event_name == "sandgate.request").collect();
    let allowed = requests
        .iter()
        .find(|(_, r)| text(attr(&r.attributes, "sandgate.decision")) == "allow")
        .unwrap_or_else(|| panic!("no allowed request: {requests:#?}"));
    assert_eq!(text(attr(&allowed.1.attributes, "server.address")), "127.0.0.1");
    assert_eq!(text(attr(&allowed.1.attributes, "server.port")), p.to_string());
    // The sandbox's resource: the host, the user, the sandbox and its command.
    let res = &allowed.0;
    for key in ["host.name", "user.name", "sandgate.sandbox.id", "sandgate.tier", "process.command"]
    {
        assert!(!text(attr(res, key)).is_empty(), "{key} missing: {res:?}");
    }
    assert_eq!(text(attr(res, "sandgate.tier")), "net");
    assert!(requests.iter().any(|(_, r)| text(attr(&r.attributes, "sandgate.decision")) == "deny"));
    let blocked = records.iter().find(|(_, r)| r.event_name == "sandgate.blocked_packet").unwrap();
    assert_eq!(text(attr(&blocked.1.attributes, "server.address")), HOST4);

    // The counters: the secret was injected (so its absence below means something), and the
    // requests were counted by decision. Metrics are sent after the records of the same moment,
    // cumulative: a later export has them.
    let counter = |m: &ExportMetricsServiceRequest, name: &str| -> i64 {
        m.resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .filter(|x| x.name == name)
            .filter_map(|x| match &x.data {
                Some(Data::Sum(s)) => Some(&s.data_points),
                _ => None,
            })
            .flatten()
            .map(|p| match p.value {
                Some(Number::AsInt(n)) => n,
                _ => 0,
            })
            .sum()
    };
    loop {
        let e = collector.next(Duration::from_secs(30)).expect("a metrics export");
        if e.path == "/v1/metrics" {
            let m = ExportMetricsServiceRequest::decode(e.body.as_slice()).expect("OTLP metrics");
            if counter(&m, "sandgate.secrets.injected") >= 1 {
                assert!(counter(&m, "sandgate.requests") >= 2, "{m:?}");
                assert!(counter(&m, "sandgate.blocked_packets") >= 1, "{m:?}");
                exports.push(e);
                break;
            }
        }
        exports.push(e);
    }

    // `status` shows the export and its counts.
    let status = t.status();
    assert!(status["telemetry"]["exported"].as_u64().unwrap() >= 4, "{status}");
    assert_eq!(status["telemetry"]["dropped"], 0, "{status}");
    let text_status = String::from_utf8_lossy(&t.sg(&["status"]).stdout).into_owned();
    assert!(text_status.contains("telemetry: exporting to http://127.0.0.1:"), "{text_status}");

    // Every exported byte, the requests' heads included, and the bodies alone.
    let _ = t.sg(&["stop"]);
    let raw = collector.raw();
    let bodies: Vec<u8> = exports.iter().flat_map(|e| e.body.clone()).collect();
    // The control: what the test leaked on purpose is found (the command line is exported).
    assert!(!found(&raw, &marker).is_empty(), "the search misses a leaked string");
    assert!(!found(&bodies, &marker).is_empty(), "the search misses a leaked string");
    for (what, s) in [("the injected secret", &secret), ("the Telegram token", &token)] {
        assert!(found(&raw, s).is_empty(), "{what} was exported: {:?}", found(&raw, s));
    }
    let (user, password) = proxy_auth.split_once(':').unwrap();
    assert!(found(&raw, password).is_empty(), "the upstream proxy's password was exported");
    assert!(found(&raw, &proxy_auth).is_empty(), "the upstream proxy's credentials were exported");
    let _ = user;
    // The header goes to the collector as a header (once per request) and never in a body.
    assert!(found(&bodies, &header).is_empty(), "the telemetry header is in a body");
    let times = raw.windows(header.len()).filter(|w| *w == header.as_bytes()).count();
    assert_eq!(times, collector.requests(), "once per request, as the header");
    assert!(found(&raw, &header).len() == 1, "only as itself, never encoded");
}
