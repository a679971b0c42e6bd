//! Many tunnels at once, and the other kinds of listener.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use sandgate_proxy::{Listener, Proxy, ProxyConfig, SandboxContext, SandboxId, TunnelMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server on 127.0.0.1.
async fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn open_tunnel(proxy: std::net::SocketAddr, target: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let want = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got[..], &want[..]);
    s
}

async fn many_tunnels(mode: TunnelMode, n: usize) {
    sandgate_proxy::raise_nofile_limit().unwrap();
    let echo = echo_server().await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .events(events.clone())
        .config(ProxyConfig { tunnel_mode: mode, ..ProxyConfig::default() })
        .build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..n {
        opening.spawn(open_tunnel(addr, echo));
    }
    let mut tunnels = Vec::with_capacity(n);
    while let Some(t) = opening.join_next().await {
        tunnels.push(t.unwrap());
    }
    // All of them are open at once: the proxy holds n client and n upstream sockets.
    assert_eq!(p.active_connections(), n);
    let mut talking = tokio::task::JoinSet::new();
    for (i, mut t) in tunnels.into_iter().enumerate() {
        talking.spawn(async move {
            let msg = format!("ping {i}\n");
            t.write_all(msg.as_bytes()).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            t.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg.as_bytes());
            t
        });
    }
    let mut done = Vec::with_capacity(n);
    while let Some(t) = talking.join_next().await {
        let errors: Vec<_> = events.all().into_iter().filter_map(|e| e.error).collect();
        done.push(t.unwrap_or_else(|e| panic!("{e}; proxy errors: {errors:?}")));
    }
    drop(done);
    assert_eq!(p.drain(Duration::from_secs(20)).await, 0);
}

// One test for both modes: run in parallel, they would share the process's file descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_tunnels() {
    many_tunnels(TunnelMode::Splice, 2000).await;
    many_tunnels(TunnelMode::Copy, 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transfer_arrives_intact_and_half_close_passes_through() {
    for mode in [TunnelMode::Splice, TunnelMode::Copy] {
        let echo = echo_server().await;
        let p = Proxy::builder()
            .config(ProxyConfig { tunnel_mode: mode, ..ProxyConfig::default() })
            .build();
        let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
        let t = open_tunnel(addr, echo).await;
        let (mut r, mut w) = t.into_split();
        let data: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap(); // the echo server sees EOF and closes its side
        });
        let mut back = Vec::new();
        r.read_to_end(&mut back).await.unwrap();
        writer.await.unwrap();
        assert!(back == expected, "{mode:?}: {} bytes came back", back.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_unix_sockets_and_inherited_listening_fds() {
    let origin = http_origin().await;
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let ctx = |id: &str| SandboxContext {
        id: SandboxId::new(id),
        policy: policy(&["allowed.test", "127.0.0.1"], &[]),
        token: None,
    };
    let request = format!(
        "GET http://allowed.test:{}/unix HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
        origin.port()
    );

    // A Unix socket.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    let unix = tokio::net::UnixListener::bind(&path).unwrap();
    let proxy = p.clone();
    let c = ctx("unix");
    tokio::spawn(async move { proxy.serve(unix, c).await });
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("origin says hello to /unix"), "{out}");

    // A listening TCP socket handed over as a file descriptor.
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let fd: std::os::fd::OwnedFd = std_listener.into();
    let listener = Listener::from_fd(fd).unwrap();
    let proxy = p.clone();
    let c = ctx("fd");
    tokio::spawn(async move { proxy.serve(listener, c).await });
    assert!(raw(addr, request.as_bytes()).await.contains("origin says hello to /unix"));

    // Shutdown stops every listener.
    p.shutdown();
    assert_eq!(p.drain(Duration::from_secs(10)).await, 0);
}
