//! Arbitrary bytes as a query to the DNS stub: read, and when read, answered for every outcome
//! (the answer must decode again with the same id).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandgate_proxy::dns::{DnsReply, read_query, response};

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = read_query(data) {
        for outcome in [DnsReply::Addresses(vec!["192.0.2.1".parse().unwrap()]), DnsReply::NxDomain]
        {
            let bytes = response(&q, &outcome);
            assert!(bytes.len() >= 12 && bytes[..2] == q.id.to_be_bytes());
        }
    }
});
