//! Arbitrary bytes as a SOCKS5 greeting, RFC 1929 credentials, or CONNECT request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandgate_proxy::socks::{parse_credentials, parse_greeting, parse_request};

fuzz_target!(|data: &[u8]| {
    let _ = parse_greeting(data);
    let _ = parse_credentials(data);
    if let Ok(Some((req, used))) = parse_request(data) {
        assert!(used <= data.len());
        let _ = req.target();
    }
});
