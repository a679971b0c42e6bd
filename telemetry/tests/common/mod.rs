//! What the exporter's test files share.

use std::time::{Duration, Instant};

/// The endpoint `url` as the configuration parses it.
pub fn endpoint(url: &str) -> sandgate_config::OtlpEndpoint {
    let text = format!("[telemetry]\notlp_endpoint = \"{url}\"\n");
    sandgate_config::parse_config(std::path::Path::new("t.toml"), &text, None)
        .unwrap()
        .telemetry
        .unwrap()
        .endpoint
        .unwrap()
}

/// A runtime with one worker (the exporter's task and the test's share it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

/// Polls `f` until it holds (the state it reads is the exporter's, written on its own task),
/// failing after 20 s.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
