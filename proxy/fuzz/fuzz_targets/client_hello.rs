//! Arbitrary bytes as the first bytes a client sends in a tunnel, fed to the record-layer parser
//! at once and in pieces: no panic, and the same answer however the bytes arrive.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandgate_proxy::sni::{Opening, OpeningParser, server_host};

fuzz_target!(|data: &[u8]| {
    let Some((&step, wire)) = data.split_first() else { return };
    let whole = OpeningParser::new().advance(wire);
    let mut parser = OpeningParser::new();
    let step = usize::from(step % 16) + 1;
    let mut end = 0;
    let pieces = loop {
        end = (end + step).min(wire.len());
        let r = parser.advance(&wire[..end]);
        if r != Ok(Opening::NeedMore) || end == wire.len() {
            break r;
        }
    };
    // Errors may differ (a piece can show one fault before the whole shows another); an accepted
    // hello must be the same however the bytes came.
    assert_eq!(whole.is_ok(), pieces.is_ok(), "{whole:?} vs {pieces:?}");
    if whole.is_ok() {
        assert_eq!(whole, pieces);
    }
    if let Ok(Opening::ClientHello { server_name: Some(name) }) = whole {
        let _ = server_host(&name);
    }
});
