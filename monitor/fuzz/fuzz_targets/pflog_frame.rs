//! Arbitrary bytes as a DLT_PFLOG frame: decoding never panics.
#![no_main]

use std::time::UNIX_EPOCH;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((header, packet)) = sandgate_monitor::pflog::decode(data, UNIX_EPOCH) {
        assert_eq!(header.uid, packet.uid);
        assert!(header.ruleset.len() <= 16 * 3); // 16 bytes, lossily decoded
    }
    let _ = sandgate_monitor::decode_ip(data);
});
