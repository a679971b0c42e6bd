//! Benchmark client and origin for `bench/proxy.sh` (127.0.0.1 only).
//!
//! `proxy_bench origin PORT_FILE` serves HTTP/1.1 on 127.0.0.1: `GET /bytes/N` answers N bytes,
//! anything else a short body; keep-alive.
//! `proxy_bench client ORIGIN [NAME=PROXY]...` measures, for a direct connection and through each
//! proxy: (a) one 1 GiB transfer through a CONNECT tunnel, (b) latency of new connection +
//! CONNECT + small GET (p50/p99), (c) new tunnels per second with 64 concurrent clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BIG: u64 = 1 << 30;
const LATENCY_SAMPLES: usize = 3000;
const CONCURRENCY: usize = 64;
const RATE_SECS: u64 = 4;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    match args.first().map(String::as_str) {
        Some("origin") => rt.block_on(origin(&args[1])),
        Some("client") => rt.block_on(client(&args[1..])),
        _ => eprintln!("usage: proxy_bench origin PORT_FILE | client ORIGIN [NAME=PROXY]..."),
    }
}

async fn origin(port_file: &str) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    std::fs::write(port_file, l.local_addr().expect("addr").port().to_string()).expect("write");
    loop {
        let Ok((s, _)) = l.accept().await else { continue };
        tokio::spawn(serve_origin(s));
    }
}

async fn serve_origin(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let chunk = vec![b'x'; 256 * 1024];
    let mut buf = Vec::with_capacity(4096);
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut tmp = [0u8; 4096];
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("/");
        let path =
            path.rsplit_once("://").map_or(path, |(_, r)| r.find('/').map_or("/", |i| &r[i..]));
        if let Some(n) = path.strip_prefix("/bytes/").and_then(|n| n.parse::<u64>().ok()) {
            let hdr = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            if s.write_all(hdr.as_bytes()).await.is_err() {
                return;
            }
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len() as u64) as usize;
                if s.write_all(&chunk[..k]).await.is_err() {
                    return;
                }
                left -= k as u64;
            }
        } else if s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world\n")
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Opens a connection to `origin`, directly or through a CONNECT tunnel.
async fn open(origin: SocketAddr, proxy: Option<SocketAddr>) -> std::io::Result<TcpStream> {
    let Some(p) = proxy else {
        let s = TcpStream::connect(origin).await?;
        s.set_nodelay(true)?;
        return Ok(s);
    };
    let mut s = TcpStream::connect(p).await?;
    s.set_nodelay(true)?;
    s.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes()).await?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 {
            return Err(std::io::Error::other("proxy closed during CONNECT"));
        }
        head.push(b[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
        return Err(std::io::Error::other(String::from_utf8_lossy(&head).into_owned()));
    }
    Ok(s)
}

/// GET `path` and read the whole response; returns the body length.
async fn get(s: &mut TcpStream, path: &str, buf: &mut [u8]) -> std::io::Result<u64> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes()).await?;
    let mut head = Vec::new();
    let (len, mut have) = loop {
        let n = s.read(buf).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the response head"));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&head[..i]).to_ascii_lowercase();
            let len: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            break (len, (head.len() - i - 4) as u64);
        }
    };
    while have < len {
        let n = s.read(buf).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed mid-body"));
        }
        have += n as u64;
    }
    Ok(len)
}

async fn one_request(origin: SocketAddr, proxy: Option<SocketAddr>) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    let mut s = open(origin, proxy).await?;
    get(&mut s, "/", &mut buf).await?;
    Ok(())
}

struct Row {
    name: String,
    gbps: f64,
    p50: Duration,
    p99: Duration,
    rate: f64,
}

async fn measure(
    name: &str,
    origin: SocketAddr,
    proxy: Option<SocketAddr>,
) -> std::io::Result<Row> {
    // (a) throughput.
    let mut buf = vec![0u8; 256 * 1024];
    let mut s = open(origin, proxy).await?;
    let t = Instant::now();
    let n = get(&mut s, &format!("/bytes/{BIG}"), &mut buf).await?;
    let gbps = n as f64 / t.elapsed().as_secs_f64() / 1e9;
    drop(s);

    // (b) latency, sequential (after a short warm-up).
    for _ in 0..200 {
        one_request(origin, proxy).await?;
    }
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        let t = Instant::now();
        one_request(origin, proxy).await?;
        samples.push(t.elapsed());
    }
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];

    // (c) new tunnels per second, 64 clients.
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let t = Instant::now();
    for _ in 0..CONCURRENCY {
        let (done, errors, stop) = (done.clone(), errors.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match one_request(origin, proxy).await {
                    Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(RATE_SECS)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
    let errs = errors.load(Ordering::Relaxed);
    if errs > 0 {
        eprintln!("{name}: {errs} failed requests during (c)");
    }
    Ok(Row { name: name.to_owned(), gbps, p50, p99, rate })
}

async fn client(args: &[String]) {
    let origin: SocketAddr = args[0].parse().expect("origin address");
    let mut rows = Vec::new();
    let direct = measure("direct", origin, None).await.expect("direct");
    rows.push(direct);
    for spec in &args[1..] {
        let (name, addr) = spec.split_once('=').expect("NAME=ADDR");
        match measure(name, origin, Some(addr.parse().expect("proxy address"))).await {
            Ok(r) => rows.push(r),
            Err(e) => eprintln!("{name}: failed: {e}"),
        }
    }
    let d = &rows[0];
    let (d_gbps, d_p50, d_p99, d_rate) = (d.gbps, d.p50, d.p99, d.rate);
    println!(
        "{:<16} {:>10} {:>7} {:>10} {:>10} {:>12} {:>12} {:>11} {:>6}",
        "", "(a) GB/s", "x", "(b) p50", "p99", "added p50", "added p99", "(c) conn/s", "x"
    );
    for r in &rows {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{:<16} {:>10.2} {:>7.2} {:>8.0}µs {:>8.0}µs {:>10.0}µs {:>10.0}µs {:>11.0} {:>6.2}",
            r.name,
            r.gbps,
            r.gbps / d_gbps,
            us(r.p50),
            us(r.p99),
            us(r.p50) - us(d_p50),
            us(r.p99) - us(d_p99),
            r.rate,
            r.rate / d_rate
        );
    }
}
