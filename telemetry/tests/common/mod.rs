//! What the exporter's test files share.

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
