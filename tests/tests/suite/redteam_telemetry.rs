//! Red team of the OpenTelemetry export (issue 35, part 2), end to end with a real daemon.
//!
//! - The daemon runs outside every sandbox and connects where `[telemetry] otlp_endpoint` says:
//!   a sandboxed agent that could set it would have a channel past the proxy and the firewall.
//!   The agent plants the section wherever a project file could be read, in the writable
//!   checkout, tries the real configuration, and the launch carries OpenTelemetry's own
//!   variables (`OTEL_EXPORTER_OTLP_*`); the daemon, restarted from that checkout, still exports
//!   to the user's collector only. The control: the same section in the user's file does move
//!   the export.
//! - A sandbox that opens thousands of refused connections while the collector takes the
//!   connection and never reads: the refusals stay fast, `status` answers, and the records the
//!   queue cannot hold are counted as dropped.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandgate_test_support::otlp::Collector;

use crate::support::daemon::{DaemonEnv, can_sandbox, start_daemon, wait_until};
use sandgate_tests::skip_unless;

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Waits until `collector` receives a logs export holding `marker` (a sandbox's command line is
/// in its records' resource).
fn wait_for_marker(collector: &Collector, marker: &str, t: &DaemonEnv) {
    loop {
        let e = collector.next(Duration::from_secs(30)).unwrap_or_else(|| {
            panic!("no export with {marker}; status {}", t.status_now());
        });
        if e.path == "/v1/logs" && contains(&e.body, marker) {
            return;
        }
    }
}

#[test]
fn a_sandboxed_agent_cannot_point_the_export_elsewhere() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let mine = Collector::start();
    let evil = Collector::start();
    let unique = format!("{}-{}", std::process::id(), mine.endpoint().len());
    let mut t = DaemonEnv::new(&format!(
        "[telemetry]\notlp_endpoint = \"{}\"\ninterval = \"100ms\"\n",
        mine.endpoint()
    ));
    // OpenTelemetry's own variables, in the launch and so in the daemon it starts: not read.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ] {
        t.vars.push((var.into(), Some(evil.endpoint())));
    }
    t.vars.push(("OTEL_EXPORTER_OTLP_HEADERS".into(), Some("x-exfil=1".into())));
    start_daemon(&t);
    let section = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nheaders = {{ x-exfil = \"1\" }}\ninterval = \"100ms\"\n",
        evil.endpoint()
    );
    let config = t.env.config_home().join("sandgate/config.toml");
    // The agent, in the build tier (the checkout writable): the section in every file name a
    // project configuration could have, and appended to the real configuration.
    let script = format!(
        "for f in .sandgate.toml sandgate.toml .sandgate/config.toml .config/sandgate/config.toml \
         .sandgate/telemetry.toml; do mkdir -p \"$(dirname $f)\"; printf '%s' '{section}' > $f; done; \
         printf '%s' '{section}' >> {c} 2>/dev/null && echo WROTE-CONFIG; echo planted",
        c = config.display()
    );
    let out = t.cmd().args(["build", "--", "sh", "-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("planted"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("WROTE-CONFIG"), "the sandbox changed the real configuration");
    // (Dot-entries at the top of the checkout are protected; the rest is planted.)
    assert!(t.proj.join("sandgate.toml").exists(), "the checkout is writable: planted there");
    // A daemon started again from the checkout (with the agent's files, the OTEL variables).
    let out = t.sg(&["stop"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let marker = format!("after-restart-{unique}");
    let out = t.cmd().args(["net", "--", "echo", &marker]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Export is on (the user's collector gets the new sandbox), and went nowhere else.
    wait_for_marker(&mine, &marker, &t);
    assert_eq!(evil.requests(), 0, "the daemon exported to the agent's collector");
    let status = t.status();
    assert_eq!(status["telemetry"]["endpoint"], mine.endpoint(), "{status}");
    let _ = t.sg(&["stop"]);

    // The control: the same section in the user's own file moves the export.
    std::fs::write(&config, &section).unwrap();
    let marker = format!("control-{unique}");
    let out = t.cmd().args(["net", "--", "echo", &marker]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for_marker(&evil, &marker, &t);
    let _ = t.sg(&["stop"]);
}

#[test]
fn a_flood_of_refusals_with_a_collector_that_never_reads_costs_only_dropped_records() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    // Takes every connection and never reads from it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            keep.lock().unwrap().push(c);
        }
    });
    const N: usize = 6000;
    let t = DaemonEnv::new(&format!(
        "[daemon]\nevents_per_minute = 1000000\n\n\
         [network]\ndeny = [\"127.0.0.1:9\"]\n\n\
         [telemetry]\notlp_endpoint = \"http://{addr}\"\ninterval = \"100ms\"\n"
    ));
    start_daemon(&t);
    // N refused CONNECTs on one keep-alive-less connection each, as fast as the proxy answers.
    let py = format!(
        "import socket, time\n\
         t = time.time()\n\
         for i in range({N}):\n\
         \x20   s = socket.create_connection(('127.0.0.1', 3128))\n\
         \x20   s.sendall(b'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\nHost: 127.0.0.1:9\\r\\n\\r\\n')\n\
         \x20   assert b' 403 ' in s.recv(4096)[:20]\n\
         \x20   s.close()\n\
         print('took', time.time() - t)\n"
    );
    // Its output to files: the launcher reports each refusal on stderr, more than a pipe holds.
    let (out_path, err_path) = (t.env.root.path().join("out"), t.env.root.path().join("err"));
    let mut child = t
        .cmd()
        .args(["net", "--", "python3", "-c", &py])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    // `status` answers while the flood goes on.
    let mut slowest = Duration::ZERO;
    while child.try_wait().unwrap().is_none() {
        let started = Instant::now();
        let s = t.status_now();
        slowest = slowest.max(started.elapsed());
        if s.is_null() {
            break;
        }
    }
    let code = child.wait().unwrap();
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    let tail: String =
        stderr.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(code.success(), "{stdout}\n{tail}");
    let took: f64 = stdout.trim().trim_start_matches("took ").parse().unwrap();
    eprintln!("{N} refusals in {took:.2} s; slowest status {slowest:?}");
    assert!(slowest < Duration::from_secs(2), "status took {slowest:?}");
    // Every refusal was stored and so logged: what the queue (4,096) and one batch (512) could
    // not hold is counted as dropped, and nothing reached the collector.
    let dropped = |s: &serde_json::Value| s["telemetry"]["dropped"].as_u64().unwrap_or(0) as usize;
    wait_until("the overflow counted", Duration::from_secs(30), || {
        dropped(&t.status()) >= N - 4096 - 512
    });
    let status = t.status();
    let dropped = dropped(&status);
    assert!(dropped <= N, "{status}");
    assert_eq!(status["telemetry"]["exported"], 0, "{status}");
    assert!(!held.lock().unwrap().is_empty(), "the exporter never connected");
    let _ = t.sg(&["stop"]);
}
