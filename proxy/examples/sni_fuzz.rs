//! Randomised test of the tunnel-opening parser on stable Rust (cargo-fuzz needs nightly):
//! `cargo run -p sandgate-proxy --example sni_fuzz -- [SECONDS] [SEED]` (default 60 s), run by
//! `bench/sni-fuzz.sh`.
//!
//! Inputs are real ClientHellos (rustls, for several names and options) mutated (bit flips,
//! inserted, removed and duplicated bytes, re-framed into records, records put in front), random
//! record sequences, and random bytes. For each input it checks:
//!
//! 1. no panic, whether the bytes come at once or in pieces, and an accepted hello is the same
//!    either way;
//! 2. against rustls's own server-side parser (`rustls::server::Acceptor`): whenever sandgate
//!    accepts a hello whose name passes `server_host`, rustls either refuses it or reads the same
//!    name; whenever sandgate accepts a hello without a name, rustls reads none; whenever sandgate
//!    says "not TLS", rustls finds no ClientHello.
//!
//! Any disagreement is printed with the input in hex, and the exit status is 1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use sandgate_proxy::sni::{Opening, OpeningParser, server_host};

/// xorshift64*: enough randomness for mutation, and reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Real ClientHellos as rustls sends them.
fn seeds() -> Vec<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut out = Vec::new();
    for (name, sni, tls12_only) in [
        ("crates.io", true, false),
        ("static.crates.io", true, true),
        ("allowed.test", false, false),
        ("xn--bcher-kva.example", true, false),
    ] {
        let versions: &[&rustls::SupportedProtocolVersion] =
            if tls12_only { &[&rustls::version::TLS12] } else { rustls::DEFAULT_VERSIONS };
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.enable_sni = sni;
        let server = ServerName::try_from(name.to_owned()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
        let mut wire = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut wire).unwrap();
        }
        out.push(wire);
    }
    out
}

/// The handshake payload of a run of records.
fn payload(wire: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    let mut rest = wire;
    while rest.len() >= 5 {
        let len = (u16::from_be_bytes([rest[3], rest[4]]) as usize).min(rest.len() - 5);
        msg.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    msg
}

fn records(msg: &[u8], max: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in msg.chunks(max.max(1)) {
        let kind = if rng.below(50) == 0 { 0x14 + rng.below(6) as u8 } else { 0x16 };
        out.extend([kind, 3, [1, 3][rng.below(2)]]);
        out.extend((chunk.len() as u16).to_be_bytes());
        out.extend(chunk);
    }
    out
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = seed.to_vec();
    match rng.below(8) {
        0 => v = records(&payload(&v), 1 + rng.below(64), rng),
        1 => {
            // A record in front: alert, CCS, empty or odd handshake record.
            let kind = 0x14 + rng.below(5) as u8;
            let len = rng.below(3);
            let mut front = vec![kind, 3, 3, 0, len as u8];
            front.extend((0..len).map(|_| rng.byte()));
            v = [front, v].concat();
        }
        _ => {}
    }
    for _ in 0..1 + rng.below(4) {
        if v.is_empty() {
            break;
        }
        let at = rng.below(v.len());
        match rng.below(6) {
            0 => v[at] ^= 1 << rng.below(8),
            1 => v[at] = rng.byte(),
            2 => {
                v.remove(at);
            }
            3 => v.insert(at, rng.byte()),
            4 => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
            _ => v.truncate(at),
        }
    }
    v
}

fn random_records(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let len = rng.below(40);
        v.extend([0x14 + rng.below(6) as u8, 3, rng.below(5) as u8, 0, len as u8]);
        if rng.below(3) == 0 {
            v.extend([1, 0, 0, rng.byte()]);
        }
        v.extend((0..len).map(|_| rng.byte()));
    }
    v
}

/// What rustls's server-side parser makes of the same bytes: `Some(Some(name))`/`Some(None)` for
/// a ClientHello with/without a name, `None` when it finds none.
fn rustls_reads(wire: &[u8]) -> Option<Option<String>> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = wire;
    loop {
        match acceptor.read_tls(&mut rest) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Some(accepted.client_hello().server_name().map(str::to_owned));
            }
            Ok(None) if rest.is_empty() => return None,
            Ok(None) => {}
            Err(_) => return None,
        }
    }
}

fn check(wire: &[u8], step: usize) -> Result<(), String> {
    let whole = OpeningParser::new().advance(wire);
    let mut parser = OpeningParser::new();
    let mut end = 0;
    let pieces = loop {
        end = (end + step).min(wire.len());
        let r = parser.advance(&wire[..end]);
        if r != Ok(Opening::NeedMore) || end == wire.len() {
            break r;
        }
    };
    if whole.is_ok() != pieces.is_ok() || (whole.is_ok() && whole != pieces) {
        return Err(format!("whole {whole:?} but in pieces of {step}: {pieces:?}"));
    }
    match whole {
        Ok(Opening::ClientHello { server_name: Some(name) }) => {
            if server_host(&name).is_ok()
                && let Some(seen) = rustls_reads(wire)
                && !seen.as_deref().is_some_and(|s| s.eq_ignore_ascii_case(&name))
            {
                return Err(format!("sandgate reads {name:?}, rustls reads {seen:?}"));
            }
        }
        Ok(Opening::ClientHello { server_name: None }) => {
            if let Some(Some(seen)) = rustls_reads(wire) {
                return Err(format!("sandgate reads no name, rustls reads {seen:?}"));
            }
        }
        Ok(Opening::NotTls) => {
            if let Some(seen) = rustls_reads(wire) {
                return Err(format!("sandgate says not TLS, rustls reads a hello for {seen:?}"));
            }
        }
        Ok(Opening::NeedMore) | Err(_) => {}
    }
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
            | 1
    });
    let mut rng = Rng(seed);
    let seeds = seeds();
    for s in &seeds {
        check(s, s.len()).expect("a real ClientHello");
        let ok = OpeningParser::new().advance(s);
        assert!(matches!(ok, Ok(Opening::ClientHello { .. })), "seed refused: {ok:?}");
        assert!(rustls_reads(s).is_some(), "the rustls oracle reads no hello in a seed");
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut runs, mut accepted, mut failures) = (0u64, 0u64, 0u64);
    while Instant::now() < deadline {
        for _ in 0..256 {
            let wire = match rng.below(10) {
                0 => random_records(&mut rng),
                1 => (0..rng.below(64)).map(|_| rng.byte()).collect(),
                _ => {
                    let s = &seeds[rng.below(seeds.len())];
                    mutate(s, &mut rng)
                }
            };
            let step = 1 + rng.below(32);
            if matches!(OpeningParser::new().advance(&wire), Ok(Opening::ClientHello { .. })) {
                accepted += 1;
            }
            if let Err(why) = check(&wire, step) {
                failures += 1;
                let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
                eprintln!("DISAGREEMENT: {why}\n  input: {hex}");
            }
            runs += 1;
        }
    }
    println!(
        "sni_fuzz: seed {seed}, {secs} s, {runs} inputs, {accepted} accepted hellos, \
         {failures} disagreements"
    );
    if failures > 0 {
        std::process::exit(1);
    }
}
