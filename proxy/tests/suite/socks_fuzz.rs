//! A mutation fuzzer for the SOCKS5 parsers on stable Rust (no cargo-fuzz needed): random and
//! mutated-valid frames, checked for panics and for claiming more bytes than given.
//!
//! `cargo test -p sandgate-proxy --test suite socks_fuzz` runs it for a second;
//! `SOCKS_FUZZ_SECS=60 cargo test -p sandgate-proxy --test suite socks_fuzz -- --nocapture` for longer.

use std::time::{Duration, Instant};

use sandgate_proxy::socks::{parse_credentials, parse_greeting, parse_request};

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
        (self.next() % n as u64) as usize
    }
}

const SEEDS: &[&[u8]] = &[
    &[5, 1, 0],
    &[5, 2, 0, 2],
    &[1, 4, b'u', b's', b'e', b'r', 3, b'p', b'w', b'd'],
    &[5, 1, 0, 1, 127, 0, 0, 1, 0, 80],
    &[5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 187],
    &[5, 1, 0, 3, 11, b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm', 0, 22],
    &[5, 1, 0, 3, 5, b'a', 0, b'.', b'b', b'c', 1, 187],
];

fn mutate(rng: &mut Rng) -> Vec<u8> {
    let mut v = SEEDS[rng.below(SEEDS.len())].to_vec();
    for _ in 0..rng.below(6) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            2 if !v.is_empty() => {
                v.truncate(rng.below(v.len()));
            }
            3 => {
                let n = rng.below(300);
                v.extend((0..n).map(|_| rng.next() as u8));
            }
            _ => {
                // Extreme length bytes.
                if v.len() > 4 {
                    v[4] = [0, 1, 63, 64, 253, 254, 255][rng.below(7)];
                }
            }
        }
    }
    v
}

fn check(buf: &[u8]) {
    if let Ok(Some((_, n))) = parse_greeting(buf) {
        assert!(n <= buf.len(), "greeting claims {n} of {}", buf.len());
    }
    if let Ok(Some((_, n))) = parse_credentials(buf) {
        assert!(n <= buf.len(), "credentials claim {n} of {}", buf.len());
    }
    if let Ok(Some((req, n))) = parse_request(buf) {
        assert!(n <= buf.len(), "request claims {n} of {}", buf.len());
        if let Ok(t) = req.target() {
            // Whatever is accepted is a clean host: no control byte survives into a target.
            assert!(!t.host.to_string().chars().any(char::is_control), "{t}");
        }
    }
}

#[test]
fn socks_parsers_survive_fuzzing() {
    let secs: u64 = std::env::var("SOCKS_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let seed = std::env::var("SOCKS_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let mut rng = Rng(seed | 1);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut runs = 0u64;
    while Instant::now() < end {
        for _ in 0..1000 {
            let buf = if rng.below(4) == 0 {
                let n = rng.below(600);
                (0..n).map(|_| rng.next() as u8).collect()
            } else {
                mutate(&mut rng)
            };
            check(&buf);
            runs += 1;
        }
    }
    println!("socks fuzz: {runs} inputs in {secs}s (seed {seed}), no panic");
}
