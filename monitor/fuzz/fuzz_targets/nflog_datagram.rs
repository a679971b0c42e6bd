//! Arbitrary bytes as an NFLOG netlink datagram: decoding and aggregation never panic, and every
//! decoded packet is counted exactly once.
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use sandgate_monitor::nflog::decode_datagram;
use sandgate_monitor::{Aggregator, AggregatorConfig, Attribution, VecSink};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    let summary = decode_datagram(data, UNIX_EPOCH + Duration::from_secs(1), &mut out);
    assert_eq!(summary.packets, out.len());
    let mut agg = Aggregator::new(
        AggregatorConfig { window: Duration::from_secs(1), max_keys: 4 },
        Attribution::new(),
    );
    let mut sink = VecSink::default();
    agg.observe_all(&out, &mut sink);
    agg.flush(SystemTime::now(), &mut sink);
    agg.finish(&mut sink);
    assert_eq!(sink.alerts.iter().map(|a| a.count).sum::<u64>(), out.len() as u64);
});
