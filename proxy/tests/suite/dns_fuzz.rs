//! A mutation fuzzer for the DNS stub's request handling on stable Rust (no cargo-fuzz needed):
//! real queries (several names, types, EDNS, compression pointers) mutated, random bytes, and
//! messages built around hostile names (pointer loops, pointers out of range, 63-byte labels,
//! 255-byte names), fed to [`read_query`] and, when read, to [`response`] for every outcome.
//! Checks: no panic; an answered query's response decodes with the same id and question; a name
//! accepted as a host holds no byte a host name may not.
//!
//! `cargo test -p sandgate-proxy --test suite dns_fuzz` runs it for a second;
//! `DNS_FUZZ_SECS=60 cargo test -p sandgate-proxy --test suite dns_fuzz -- --nocapture` for longer
//! (`bench/fuzz-parsers.sh` runs every parser's fuzzer for 60 s).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use sandgate_config::Host;
use sandgate_proxy::dns::{DnsReply, error_response, read_query, response};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic per seed, so a failure can be replayed from the seed printed.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let names = ["example.com.", "a.b.c.d.e.f.example.org.", "xn--bcher-kva.example.", "x."];
    let types = [RecordType::A, RecordType::AAAA, RecordType::TXT, RecordType::HTTPS];
    for (i, name) in names.iter().enumerate() {
        for (j, t) in types.iter().enumerate() {
            let mut m = Message::new((i * 16 + j) as u16, MessageType::Query, OpCode::Query);
            m.metadata.recursion_desired = true;
            m.add_query(Query::query(Name::from_ascii(name).unwrap(), *t));
            if j % 2 == 0 {
                m.set_edns(Edns::new());
            }
            out.push(m.to_vec().unwrap());
        }
    }
    // Hand-made: a compressed second name pointing at the first, a self-pointer, a pointer past
    // the end, a 63-byte label, a 255-byte name.
    let header = |qd: u8| vec![0xab, 0xcd, 1, 0, 0, qd, 0, 0, 0, 0, 0, 0];
    let mut two = header(2);
    two.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01\x03www\xc0\x0c\x00\x01\x00\x01");
    out.push(two);
    let mut selfp = header(1);
    selfp.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
    out.push(selfp);
    let mut past = header(1);
    past.extend_from_slice(&[0x03, b'w', b'w', b'w', 0xc3, 0xff, 0, 1, 0, 1]);
    out.push(past);
    let mut long = header(1);
    long.push(63);
    long.extend_from_slice(&[b'a'; 63]);
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    out.push(long);
    let mut huge_name = header(1);
    for _ in 0..4 {
        huge_name.push(63);
        huge_name.extend_from_slice(&[b'b'; 63]);
    }
    huge_name.extend_from_slice(&[0, 0, 1, 0, 1]);
    out.push(huge_name);
    out
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..rng.below(8) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            2 if !v.is_empty() => v.truncate(rng.below(v.len())),
            3 => {
                let n = rng.below(300);
                v.extend((0..n).map(|_| rng.next() as u8));
            }
            4 if v.len() > 13 => {
                // A compression pointer anywhere after the header, to anywhere.
                let i = 12 + rng.below(v.len() - 13);
                let to = rng.below(v.len() + 64) as u16;
                v[i] = 0xc0 | (to >> 8) as u8;
                v[i + 1] = to as u8;
            }
            5 if v.len() > 12 => {
                // Counts: questions, answers, authorities, additionals.
                let i = 4 + rng.below(8);
                v[i] = [0, 1, 2, 0xff][rng.below(4)];
            }
            _ if v.len() > 13 => {
                // Label lengths at their limits.
                let i = 12 + rng.below(v.len() - 12);
                v[i] = [0, 1, 62, 63, 64, 0x7f, 0x80, 0xbf][rng.below(8)];
            }
            _ => {}
        }
    }
    if rng.below(50) == 0 {
        v.resize(1200 + rng.below(70_000), rng.next() as u8);
    }
    v
}

fn check(buf: &[u8]) {
    let q = match read_query(buf) {
        Ok(q) => q,
        Err(m) => {
            if let Some(id) = m.id {
                let r = Message::from_vec(&error_response(id, m.error.rcode())).unwrap();
                assert_eq!(r.metadata.id, id);
            }
            return;
        }
    };
    if let Ok(Host::Name(n)) = &q.host {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        assert!(n.as_str().chars().all(ok), "accepted {:?}", n.as_str());
    }
    let addrs: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
    for outcome in [DnsReply::Addresses(addrs), DnsReply::NxDomain, DnsReply::ServFail] {
        let bytes = response(&q, &outcome);
        let r = Message::from_vec(&bytes).unwrap_or_else(|e| panic!("own response: {e}"));
        assert_eq!(r.metadata.id, q.id);
        assert_eq!(r.queries, vec![q.query.clone()]);
    }
}

#[test]
fn dns_request_handling_survives_fuzzing() {
    let secs: u64 = std::env::var("DNS_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let seed = std::env::var("DNS_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xd45);
    let seeds = seeds();
    for s in &seeds {
        check(s);
    }
    let mut rng = Rng(seed | 1);
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut runs, mut read) = (0u64, 0u64);
    while Instant::now() < end {
        for _ in 0..1000 {
            let buf = if rng.below(4) == 0 {
                let n = rng.below(600);
                (0..n).map(|_| rng.next() as u8).collect()
            } else {
                mutate(&mut rng, &seeds)
            };
            if read_query(&buf).is_ok() {
                read += 1;
            }
            check(&buf);
            runs += 1;
        }
    }
    println!("dns fuzz: {runs} inputs ({read} read as queries) in {secs}s (seed {seed}), no panic");
}
