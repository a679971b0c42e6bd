//! The DNS stub's answers per second and latency, over real UDP on 127.0.0.1, for an allowed
//! name (answered from the stub's cache after the first lookup) and for refused names (a fresh
//! random name each time: unknown names are NXDOMAIN without a lookup), in one run. Run by
//! `bench/dns.sh`.
//!
//! `cargo run -p sandgate-proxy --example dns_bench -- [SECONDS]` (default 2 s per phase).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sandgate_config::{
    DomainName, DomainPattern, NetMode, NetworkPolicy, PatternUse, Rule, RuleSource,
};
use sandgate_proxy::{
    BoxFuture, EventSink, Proxy, ProxyEvent, Resolver, SandboxContext, SandboxId,
};
use tokio::net::UdpSocket;

/// Every name resolves to one public test address at once (the host's resolver is not measured).
struct Fixed;

impl Resolver for Fixed {
    fn resolve<'a>(
        &'a self,
        _: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(vec![SocketAddr::from(([192, 0, 2, 1], port))]) })
    }
}

/// Events are counted, not stored (the daemon's sink queues them for the store off the hot path).
#[derive(Default)]
struct Count(AtomicU64);

impl EventSink for Count {
    fn record(&self, _: ProxyEvent) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn query(name: &str, id: u16) -> Vec<u8> {
    let mut out = vec![(id >> 8) as u8, id as u8, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.') {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.extend_from_slice(&[0, 0, 1, 0, 1]);
    out
}

/// One client asking `name(i)` in turn: latencies in µs, sorted.
async fn latencies(stub: SocketAddr, n: usize, name: impl Fn(usize) -> String) -> Vec<f64> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(stub).await.unwrap();
    let mut buf = [0u8; 1500];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let q = query(&name(i), i as u16);
        let t = Instant::now();
        sock.send(&q).await.unwrap();
        let _ = sock.recv(&mut buf).await.unwrap();
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// `clients` clients, each with one query in flight, for `secs`: answers per second.
async fn rate(stub: SocketAddr, clients: usize, secs: f64, refused: bool) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            sock.connect(stub).await.unwrap();
            let mut buf = [0u8; 1500];
            let mut i = 0usize;
            while Instant::now() < end {
                let name = if refused {
                    format!("x{c}-{i}.refused.example")
                } else {
                    "pkgs.example.com".into()
                };
                sock.send(&query(&name, i as u16)).await.unwrap();
                if tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf)).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / secs
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let events = Arc::new(Count::default());
        let proxy = Proxy::builder().resolver(Arc::new(Fixed)).events(events.clone()).build();
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let stub = udp.local_addr().unwrap();
        let allow = vec![Rule {
            pattern: Some(DomainPattern::parse("*.example.com", PatternUse::Allow).unwrap()),
            source: RuleSource::CommandLine,
        }];
        let ctx = SandboxContext {
            id: SandboxId::new("sg-bench"),
            policy: Arc::new(NetworkPolicy::new("net", NetMode::Proxy, allow, vec![])),
            token: None,
        };
        tokio::spawn(async move { proxy.serve_dns(Some(udp), None, ctx).await });
        // Warm up (and fill the cache for the allowed name).
        latencies(stub, 200, |_| "pkgs.example.com".into()).await;
        let n = 5000;
        let allowed = latencies(stub, n, |_| "pkgs.example.com".into()).await;
        let refused = latencies(stub, n, |i| format!("q{i}.refused.example")).await;
        println!("one client, {n} queries each, µs:");
        for (what, v) in [("allowed (cached)", &allowed), ("refused (NXDOMAIN)", &refused)] {
            println!("  {what:<20} p50 {:>7.1}  p90 {:>7.1}  p99 {:>7.1}", pct(v, 0.5), pct(v, 0.9), pct(v, 0.99));
        }
        for clients in [1, 16] {
            let a = rate(stub, clients, secs, false).await;
            let r = rate(stub, clients, secs, true).await;
            println!("{clients:>2} client(s), one query in flight each, {secs} s: allowed (cached) {a:>8.0}/s   refused {r:>8.0}/s");
        }
        println!("events recorded: {}", events.0.load(Ordering::Relaxed));
    });
}
