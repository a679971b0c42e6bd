//! NFLOG decode + aggregate throughput: `cargo bench -p sandgate-monitor --bench monitor_nflog`.
//!
//! One iteration decodes a datagram of 64 NFLOG packet records (IPv4/IPv6, TCP/UDP/ICMP, as the
//! kernel batches them) and folds every packet into the aggregator; criterion reports packets/s.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sandgate_monitor::fixtures::{icmp, ip_packet, tcp, udp};
use sandgate_monitor::nflog::{decode_datagram, fixtures::packet_message};
use sandgate_monitor::{Aggregator, AggregatorConfig, Attribution, VecSink};

const PER_DATAGRAM: usize = 64;

fn datagram() -> Vec<u8> {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut d = Vec::new();
    for i in 0..PER_DATAGRAM {
        let port = 1000 + (i % 16) as u16;
        let (family, payload) = match i % 4 {
            0 => (2, ip_packet(ip("10.200.0.2"), ip("10.200.0.1"), 6, &tcp(40000, port, 2))),
            1 => {
                (2, ip_packet(ip("10.200.0.2"), ip("10.200.0.1"), 17, &udp(40000, port, &[0; 32])))
            }
            2 => (10, ip_packet(ip("fd00::2"), ip("fd00::1"), 6, &tcp(40000, port, 2))),
            _ => (2, ip_packet(ip("10.200.0.2"), ip("10.200.0.1"), 1, &icmp(8, 0))),
        };
        d.extend(packet_message(family, "sbx-bench", Some(1001), Some(1001), None, &payload));
    }
    d
}

fn decode_and_aggregate(c: &mut Criterion) {
    let dgram = datagram();
    let mut group = c.benchmark_group("nflog");
    group.throughput(Throughput::Elements(PER_DATAGRAM as u64));
    let mut agg = Aggregator::new(
        AggregatorConfig { window: Duration::from_secs(10), max_keys: 4096 },
        Attribution::new(),
    );
    let mut sink = VecSink::default();
    let mut packets = Vec::with_capacity(PER_DATAGRAM);
    group.bench_function("decode_aggregate_64", |b| {
        b.iter(|| {
            packets.clear();
            let s = decode_datagram(black_box(&dgram), SystemTime::now(), &mut packets);
            agg.observe_all(&packets, &mut sink);
            sink.alerts.clear();
            black_box(s)
        })
    });
    group.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, decode_and_aggregate);
}

criterion_main!(group::benches);
