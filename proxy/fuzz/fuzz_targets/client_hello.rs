//! Arbitrary bytes as the first bytes a client sends in a tunnel.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandgate_proxy::sni::parse_client_hello;

fuzz_target!(|data: &[u8]| {
    let _ = parse_client_hello(data);
});
