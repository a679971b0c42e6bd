//! Benchmark client and origin for `bench/proxy.sh` (127.0.0.1 only).
//!
//! `proxy_bench origin PORT_FILE` serves HTTP/1.1 on 127.0.0.1: `GET /bytes/N` answers N bytes,
//! anything else a short body; keep-alive.
//! `proxy_bench sandgate PORT_FILE` serves the proxy library in process, allowing 127.0.0.1 only
//! (what `sandgate proxy --allow 127.0.0.1` serves, without building the whole binary: for
//! profiling the proxy alone).
//! `proxy_bench client ORIGIN [NAME=PROXY]...` measures, for a direct connection and through each
//! proxy: (a) one 1 GiB transfer through a CONNECT tunnel, (b) latency of new connection +
//! CONNECT + small GET (p50/p99), (c) new tunnels per second with 64 concurrent clients.
//! Each is measured for all targets interleaved (so load from elsewhere on the machine weighs on
//! direct and proxied alike): (a) median of 5 transfers, (b) 3,000 samples in blocks of 100,
//! (c) median of 3 runs of 2 s. `latency`, `throughput` and `rate` measure one of them only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BIG: u64 = 1 << 30;
const LATENCY_SAMPLES: usize = 3000;
const LATENCY_WARMUP: usize = 200;
/// (b) takes this many samples from one target before going on to the next one, ...
const LATENCY_BLOCK: usize = 100;
/// ... after this many requests that are not counted.
const LATENCY_SETTLE: usize = 3;
const CONCURRENCY: usize = 64;
const RATE_SECS: f64 = 2.0;
/// (a) and (c) are measured this many times per target, interleaved; the median is reported.
const THROUGHPUT_ROUNDS: usize = 5;
const RATE_ROUNDS: usize = 3;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    match args.first().map(String::as_str) {
        Some("origin") => rt.block_on(origin(&args[1])),
        Some("floor") => floor(&args[1]),
        Some("splice-floor") => splice_floor(&args[1]),
        Some("sandgate") => rt.block_on(serve_sandgate(&args[1])),
        Some("client") => rt.block_on(client(&args[1..])),
        Some("latency") => rt.block_on(latency_only(&args[1..])),
        Some(what @ ("throughput" | "rate")) => rt.block_on(one_only(what, &args[1..])),
        _ => eprintln!(
            "usage: proxy_bench origin|floor|splice-floor|sandgate PORT_FILE | client ORIGIN [NAME=PROXY]... \
             | latency|throughput|rate ORIGIN [NAME=PROXY]..."
        ),
    }
}

/// A reference point for (a), not a proxy to use: the most a relay can move on this machine
/// with the kernel's TCP and no copy into user space — blocking sockets, one thread per direction,
/// splice(2) through a 1 MiB pipe, no checks. What it loses to direct is the machine's ceiling.
fn splice_floor(port_file: &str) {
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, AsRawFd};

    use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};

    fn pump(from: &std::net::TcpStream, to: &std::net::TcpStream) -> std::io::Result<()> {
        let (r, w) = nix::unistd::pipe()?;
        let cap = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(1 << 20)).unwrap_or(1 << 16) as usize;
        let flags = SpliceFFlags::SPLICE_F_MOVE;
        loop {
            let n = splice(from.as_fd(), None, &w, None, cap, flags)?;
            if n == 0 {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return Ok(());
            }
            let mut left = n;
            while left > 0 {
                left -= splice(&r, None, to.as_fd(), None, left, flags)?;
            }
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std::fs::write(port_file, l.local_addr().expect("addr").port().to_string()).expect("write");
    for c in l.incoming().flatten() {
        std::thread::spawn(move || -> std::io::Result<()> {
            let mut c = c;
            c.set_nodelay(true)?;
            let mut buf = [0u8; 4096];
            let mut n = 0;
            while !buf[..n].ends_with(b"\r\n\r\n") && n < buf.len() {
                match c.read(&mut buf[n..])? {
                    0 => return Ok(()),
                    k => n += k,
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let target = head.split(' ').nth(1).unwrap_or("");
            let Ok(addr) = target.parse::<SocketAddr>() else { return Ok(()) };
            let u = std::net::TcpStream::connect(addr)?;
            u.set_nodelay(true)?;
            c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
            let (c2, u2) = (c.try_clone()?, u.try_clone()?);
            let up = std::thread::spawn(move || pump(&c2, &u2));
            let down = pump(&u, &c);
            let _ = up.join();
            down
        });
    }
}

/// A reference point for (b), not a proxy to use: the least a CONNECT proxy can do per
/// connection with the kernel's TCP — blocking sockets, one connection at a time, no checks, a
/// poll(2) loop relaying both ways. What it adds to direct is the machine's floor.
fn floor(port_file: &str) {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std::fs::write(port_file, l.local_addr().expect("addr").port().to_string()).expect("write");
    let relay = |c: &mut std::net::TcpStream| -> std::io::Result<()> {
        c.set_nodelay(true)?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut n = 0;
        while !buf[..n].ends_with(b"\r\n\r\n") && n < 4096 {
            match c.read(&mut buf[n..4096])? {
                0 => return Ok(()),
                k => n += k,
            }
        }
        let head = String::from_utf8_lossy(&buf[..n]);
        let target = head.split(' ').nth(1).unwrap_or("");
        let Ok(addr) = target.parse::<SocketAddr>() else { return Ok(()) };
        let mut u = std::net::TcpStream::connect(addr)?;
        u.set_nodelay(true)?;
        c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        let mut open = [true, true];
        while open[0] || open[1] {
            let ready = {
                let mut fds = [
                    PollFd::new(
                        c.as_fd(),
                        if open[0] { PollFlags::POLLIN } else { PollFlags::empty() },
                    ),
                    PollFd::new(
                        u.as_fd(),
                        if open[1] { PollFlags::POLLIN } else { PollFlags::empty() },
                    ),
                ];
                poll(&mut fds, PollTimeout::NONE)?;
                fds.map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            };
            for i in 0..2 {
                if !(open[i] && ready[i]) {
                    continue;
                }
                let (from, to) = if i == 0 { (&mut *c, &mut u) } else { (&mut u, &mut *c) };
                match from.read(&mut buf)? {
                    0 => {
                        let _ = to.shutdown(std::net::Shutdown::Write);
                        open[i] = false;
                    }
                    k => to.write_all(&buf[..k])?,
                }
            }
        }
        Ok(())
    };
    for mut c in l.incoming().flatten() {
        let _ = relay(&mut c);
    }
}

async fn serve_sandgate(port_file: &str) {
    use sandgate_config::{DomainPattern, NetMode, NetworkPolicy, PatternUse, Rule, RuleSource};
    use sandgate_proxy::{Proxy, SandboxContext, SandboxId};

    let rule = Rule {
        pattern: Some(DomainPattern::parse("127.0.0.1", PatternUse::Allow).expect("pattern")),
        source: RuleSource::CommandLine,
    };
    let policy = NetworkPolicy::new("net", NetMode::Proxy, vec![rule], Vec::new());
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    std::fs::write(port_file, l.local_addr().expect("addr").port().to_string()).expect("write");
    let ctx = SandboxContext { id: SandboxId::new("bench"), policy: Arc::new(policy), token: None };
    Proxy::builder().build().serve(l, ctx).await.expect("serve");
}

async fn origin(port_file: &str) {
    // `PROXY_BENCH_BIND`: where the origin listens (bench/transparent.sh puts it on a test
    // host's address inside a network namespace).
    let at = std::env::var("PROXY_BENCH_BIND").unwrap_or_else(|_| "127.0.0.1:0".into());
    let l = TcpListener::bind(at.as_str()).await.expect("bind");
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

/// Proxies given as `NAME=socks5://ADDR`: spoken to in SOCKS5 instead of HTTP CONNECT.
static SOCKS: std::sync::Mutex<Vec<SocketAddr>> = std::sync::Mutex::new(Vec::new());

/// A proxy address from a target spec; `socks5://` marks a SOCKS5 proxy.
fn proxy_addr(spec: &str) -> SocketAddr {
    match spec.strip_prefix("socks5://") {
        Some(a) => {
            let addr = a.parse().expect("proxy address");
            SOCKS.lock().unwrap().push(addr);
            addr
        }
        None => spec.parse().expect("proxy address"),
    }
}

/// RFC 1928 CONNECT to `origin` by IPv4 address, as a SOCKS client library does: greeting,
/// method answer, request, reply (each answer read before the next frame is sent).
async fn socks_connect(s: &mut TcpStream, origin: SocketAddr) -> std::io::Result<()> {
    s.write_all(&[5, 1, 0]).await?;
    let mut two = [0u8; 2];
    s.read_exact(&mut two).await?;
    if two != [5, 0] {
        return Err(std::io::Error::other(format!("SOCKS method answer {two:?}")));
    }
    let SocketAddr::V4(v4) = origin else { return Err(std::io::Error::other("IPv4 origin")) };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await?;
    if reply[1] != 0 {
        return Err(std::io::Error::other(format!("SOCKS reply {:#04x}", reply[1])));
    }
    Ok(())
}

/// Opens a connection to `origin`, directly or through a CONNECT tunnel (or SOCKS5).
async fn open(origin: SocketAddr, proxy: Option<SocketAddr>) -> std::io::Result<TcpStream> {
    let Some(p) = proxy else {
        let s = TcpStream::connect(origin).await?;
        s.set_nodelay(true)?;
        return Ok(s);
    };
    let mut s = TcpStream::connect(p).await?;
    s.set_nodelay(true)?;
    if SOCKS.lock().unwrap().contains(&p) {
        socks_connect(&mut s, origin).await?;
        return Ok(s);
    }
    s.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes()).await?;
    // Read the answer as a client library does, a buffer at a time. Nothing can follow it before
    // the GET is sent (the origin speaks only when asked), so no tunnel bytes are swallowed.
    let mut head = Vec::new();
    let mut b = [0u8; 512];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).await?;
        if n == 0 {
            return Err(std::io::Error::other("proxy closed during CONNECT"));
        }
        head.extend_from_slice(&b[..n]);
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

/// (b): p50 and p99 of new connection + CONNECT + small GET for each target (`None` = direct),
/// sequential, after a warm-up.
///
/// The targets are measured interleaved (blocks of requests to each in turn), so a change in the
/// machine's load during the run weighs on direct and proxied alike. The client runs on a
/// single-threaded runtime of its own: on the multi-thread runtime every wait adds a hand-over
/// (futex wake + context switch) from the worker that polls epoll to the thread running this
/// future, once per round trip, which would charge the client's own overhead to the proxy's
/// extra round trip.
async fn latency(
    origin: SocketAddr,
    targets: Vec<Option<SocketAddr>>,
) -> Vec<std::io::Result<(Duration, Duration)>> {
    let run = tokio::task::spawn_blocking(move || {
        (if std::env::var_os("MT").is_some() {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        })
        .enable_all()
        .build()
        .map(|rt| rt.block_on(latency_samples(origin, &targets)))
    });
    match run.await.map_err(std::io::Error::other) {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) | Err(e) => vec![Err(e)],
    }
}

async fn latency_samples(
    origin: SocketAddr,
    targets: &[Option<SocketAddr>],
) -> Vec<std::io::Result<(Duration, Duration)>> {
    let mut samples: Vec<std::io::Result<Vec<Duration>>> =
        targets.iter().map(|_| Ok(Vec::with_capacity(LATENCY_SAMPLES))).collect();
    for block in 0..(LATENCY_WARMUP + LATENCY_SAMPLES) / LATENCY_BLOCK {
        for (proxy, samples) in targets.iter().zip(&mut samples) {
            for i in 0..LATENCY_BLOCK + LATENCY_SETTLE {
                let Ok(list) = samples else { break };
                let t = Instant::now();
                match one_request(origin, *proxy).await {
                    // The first requests of a block share the machine with the previous
                    // target's last connections closing; they are not counted.
                    Ok(()) if block * LATENCY_BLOCK >= LATENCY_WARMUP && i >= LATENCY_SETTLE => {
                        list.push(t.elapsed());
                    }
                    Ok(()) => {}
                    Err(e) => *samples = Err(e),
                }
            }
        }
    }
    samples
        .into_iter()
        .map(|s| {
            let mut s = s?;
            s.sort();
            Ok((s[s.len() / 2], s[s.len() * 99 / 100]))
        })
        .collect()
}

/// Only (b): direct, then each proxy.
async fn latency_only(args: &[String]) {
    let origin: SocketAddr = args[0].parse().expect("origin address");
    let mut names = vec!["direct"];
    let mut targets = vec![None];
    for spec in &args[1..] {
        let (name, addr) = spec.split_once('=').expect("NAME=ADDR");
        names.push(name);
        targets.push(Some(proxy_addr(addr)));
    }
    let rows = latency(origin, targets).await;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let Some(Ok((d50, d99))) = rows.first() else {
        eprintln!("direct: failed: {:?}", rows.first());
        return;
    };
    for (name, row) in names.iter().zip(&rows) {
        match row {
            Ok((p50, p99)) => println!(
                "{name:<16} {:>8.0}µs {:>8.0}µs  added {:>6.0}µs {:>6.0}µs",
                us(*p50),
                us(*p99),
                us(*p50) - us(*d50),
                us(*p99) - us(*d99)
            ),
            Err(e) => eprintln!("{name}: failed: {e}"),
        }
    }
}

/// (a): one 1 GiB transfer, in GB/s.
async fn throughput(origin: SocketAddr, proxy: Option<SocketAddr>) -> std::io::Result<f64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut s = open(origin, proxy).await?;
    let t = Instant::now();
    let n = get(&mut s, &format!("/bytes/{BIG}"), &mut buf).await?;
    Ok(n as f64 / t.elapsed().as_secs_f64() / 1e9)
}

/// (c): new tunnels per second, 64 clients, for `secs`.
async fn rate(origin: SocketAddr, proxy: Option<SocketAddr>, secs: f64) -> std::io::Result<f64> {
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
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    match errors.load(Ordering::Relaxed) {
        0 => Ok(done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()),
        n => Err(std::io::Error::other(format!("{n} failed requests during (c)"))),
    }
}

/// Runs `one` for every target in turn, `rounds` times over (so a change in the machine's load
/// weighs on direct and proxied alike), and keeps the median of each; a target that fails once
/// is left out of the rounds after.
async fn median_of<F, Fut>(
    targets: &[Option<SocketAddr>],
    rounds: usize,
    mut one: F,
) -> Vec<std::io::Result<f64>>
where
    F: FnMut(Option<SocketAddr>) -> Fut,
    Fut: Future<Output = std::io::Result<f64>>,
{
    let mut all: Vec<std::io::Result<Vec<f64>>> = targets.iter().map(|_| Ok(Vec::new())).collect();
    for _ in 0..rounds {
        for (proxy, values) in targets.iter().zip(&mut all) {
            let Ok(list) = values else { continue };
            match one(*proxy).await {
                Ok(v) => list.push(v),
                Err(e) => *values = Err(e),
            }
        }
    }
    all.into_iter()
        .map(|v| {
            let mut v = v?;
            v.sort_by(f64::total_cmp);
            Ok(v[v.len() / 2])
        })
        .collect()
}

/// `ORIGIN [NAME=PROXY]...` as names and targets, direct first.
fn parse_targets(args: &[String]) -> (SocketAddr, Vec<String>, Vec<Option<SocketAddr>>) {
    let origin: SocketAddr = args[0].parse().expect("origin address");
    // `PROXY_BENCH_DIRECT_NAME`: what a connection without a proxy is, where it runs (inside a
    // sandbox it is the transparent capture, not a direct connection).
    let direct = std::env::var("PROXY_BENCH_DIRECT_NAME").unwrap_or_else(|_| "direct".into());
    let mut names = vec![direct];
    let mut targets = vec![None];
    for spec in &args[1..] {
        let (name, addr) = spec.split_once('=').expect("NAME=ADDR");
        names.push(name.to_owned());
        targets.push(Some(proxy_addr(addr)));
    }
    (origin, names, targets)
}

/// Only (a), or only (c).
async fn one_only(what: &str, args: &[String]) {
    let (origin, names, targets) = parse_targets(args);
    let values = if what == "throughput" {
        median_of(&targets, THROUGHPUT_ROUNDS, |p| throughput(origin, p)).await
    } else {
        median_of(&targets, RATE_ROUNDS, |p| rate(origin, p, RATE_SECS)).await
    };
    let base = values.first().and_then(|v| v.as_ref().ok()).copied().unwrap_or(f64::NAN);
    for (name, v) in names.iter().zip(values) {
        match v {
            Ok(v) => println!("{name:<16} {v:>10.2} {:>6.2}x", v / base),
            Err(e) => eprintln!("{name}: failed: {e}"),
        }
    }
}

async fn client(args: &[String]) {
    let (origin, names, targets) = parse_targets(args);
    let gbps = median_of(&targets, THROUGHPUT_ROUNDS, |p| throughput(origin, p)).await;
    let latencies = latency(origin, targets.clone()).await;
    let rates = median_of(&targets, RATE_ROUNDS, |p| rate(origin, p, RATE_SECS)).await;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (Some(Ok(d_gbps)), Some(Ok((d_p50, d_p99))), Some(Ok(d_rate))) =
        (gbps.first(), latencies.first(), rates.first())
    else {
        eprintln!("direct: failed: {:?} {:?} {:?}", gbps.first(), latencies.first(), rates.first());
        return;
    };
    let (d_gbps, d_p50, d_p99, d_rate) = (*d_gbps, us(*d_p50), us(*d_p99), *d_rate);
    println!(
        "{:<16} {:>10} {:>7} {:>10} {:>10} {:>12} {:>12} {:>11} {:>6}",
        "", "(a) GB/s", "x", "(b) p50", "p99", "added p50", "added p99", "(c) conn/s", "x"
    );
    for (((name, g), l), r) in names.iter().zip(gbps).zip(latencies).zip(rates) {
        let (g, r) = (g.unwrap_or(f64::NAN), r.unwrap_or(f64::NAN));
        let (p50, p99) = l.map_or((f64::NAN, f64::NAN), |(a, b)| (us(a), us(b)));
        println!(
            "{:<16} {:>10.2} {:>7.2} {:>8.0}µs {:>8.0}µs {:>10.0}µs {:>10.0}µs {:>11.0} {:>6.2}",
            name,
            g,
            g / d_gbps,
            p50,
            p99,
            p50 - d_p50,
            p99 - d_p99,
            r,
            r / d_rate
        );
    }
}
