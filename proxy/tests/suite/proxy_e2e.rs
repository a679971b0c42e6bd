//! End-to-end: real `curl` through the proxy to origins on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use sandgate_config::{DomainPattern, PatternUse, Rule, RuleSource, Target};
use sandgate_proxy::{
    ApprovalRequest, Approver, BoxFuture, DenyReason, Outcome, Proxy, ProxyConfig, ProxyToken,
    Ruling, SandboxContext, SandboxId,
};
use tokio::sync::Notify;

fn proxy() -> Proxy {
    Proxy::builder().resolver(Arc::new(TestResolver)).build()
}

fn url(host: &str, port: u16, path: &str) -> String {
    format!("http://{host}:{port}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_http_passes_and_proxy_authorization_is_not_forwarded() {
    let origin = http_origin().await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let out = curl(&[
        "-x",
        &format!("http://u:p@{addr}"),
        &url("allowed.test", origin.port(), "/hello?x=1"),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!(
            "origin says hello to /hello?x=1 at allowed.test:{} (proxy-authorization leaked: false)",
            origin.port()
        )
    );
    // The request's event is recorded once its exchange has ended, which may be after curl
    // has its answer: read it when it is there.
    let ev = wait_for(|| Some(events.all()).filter(|ev| !ev.is_empty())).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].method.as_str(), ev[0].decision, ev[0].host.as_str()),
        ("GET", Outcome::Allow, "allowed.test")
    );
    assert_eq!(ev[0].rule, "allowed.test (command line)");
    assert!(ev[0].bytes_down > 50, "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_https_passes_through_a_tunnel() {
    let tls = tls_origin(&["allowed.test"]).await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let out = curl(&[
        "-x",
        &format!("http://{addr}"),
        "--cacert",
        tls.ca_file.to_str().unwrap(),
        &format!("https://allowed.test:{}/secure", tls.addr.port()),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello to /secure"), "{out:?}");
    // The event is recorded when the tunnel closes, just after curl exits.
    let ev = wait_for(|| events.all().into_iter().find(|e| e.method == "CONNECT")).await;
    assert_eq!(ev.decision, Outcome::Allow);
    assert!(ev.bytes_up > 100 && ev.bytes_down > 500, "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_destinations_get_a_403_that_explains() {
    let p = proxy();
    let addr = serve(&p, "s1", policy(&["allowed.test", "crates.io"], &["denied.test"])).await;
    let out = curl(&["-i", "-x", &format!("http://{addr}"), "http://denied.test/x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("HTTP/1.1 403 Blocked by sandgate: deny rule\r\n"), "{out:?}");
    assert!(
        out.stdout.contains("x-sandgate-decision: deny; rule=deny denied.test (command line)"),
        "{out:?}"
    );
    assert!(out.stdout.contains("sandgate blocked the connection to denied.test:80."), "{out:?}");
    assert!(out.stdout.contains("Allowed destinations: allowed.test, crates.io."), "{out:?}");

    // CONNECT: curl reports the status, the raw response carries the body.
    let out = curl(&["-x", &format!("http://{addr}"), "https://denied.test/"]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("403"), "{out:?}");
    let resp =
        raw(addr, b"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 403 Blocked by sandgate: deny rule\r\n"), "{resp}");
    assert!(resp.contains("Rule: deny denied.test (command line)."), "{resp}");

    // Not on any list, and no approver: denied, saying so and how to ask.
    let resp = raw(addr, b"CONNECT unknown.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(resp.contains("X-Sandgate-Decision: deny; rule=no approver running"), "{resp}");
    assert!(resp.contains("`--allow unknown.test`"), "{resp}");
    assert!(!resp.contains("  "), "no runs of spaces in the body: {resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_targets_get_400() {
    let p = proxy();
    let addr = serve(&p, "s1", policy(&["allowed.test"], &[])).await;
    let long = format!("CONNECT {}.test:443 HTTP/1.1\r\n\r\n", "a".repeat(256));
    let rows: Vec<Vec<u8>> = vec![
        b"CONNECT allowed.test\0evil.test:443 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT allowed.test\r\nevil.test:443 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT evil.test@allowed.test:443 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT allowed.test HTTP/1.1\r\n\r\n".to_vec(),
        long.into_bytes(),
        b"GET http://user@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n".to_vec(),
        b"GET http://[fe80::1%25eth0]/ HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ];
    for row in rows {
        let resp = raw(addr, &row).await;
        assert!(
            resp.starts_with("HTTP/1.1 400 Bad request to sandgate: malformed request\r\n"),
            "{:?} got {resp}",
            String::from_utf8_lossy(&row)
        );
    }
    // Origin-form requests mean the client is not configured to use the proxy.
    let out = curl(&["-i", &format!("http://{addr}/path")]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 400"), "{out:?}");
    assert!(out.stdout.contains("Set HTTP_PROXY"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_refused_unless_the_ip_is_allowed() {
    let origin = http_origin().await;
    let p = proxy();
    let addr = serve(&p, "s1", policy(&["rebind.test"], &[])).await;
    let target = url("rebind.test", origin.port(), "/");
    let out = curl(&["-i", "-x", &format!("http://{addr}"), &target]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 403"), "{out:?}");
    assert!(
        out.stdout.contains("the name resolves to 127.0.0.1, which is a loopback address"),
        "{out:?}"
    );
    // The same through a tunnel.
    let connect = format!("CONNECT rebind.test:{} HTTP/1.1\r\n\r\n", origin.port());
    assert!(raw(addr, connect.as_bytes()).await.contains("loopback address"));
    // Allow the address itself, at run time: now it goes through.
    assert!(p.set_policy(&SandboxId::new("s1"), policy(&["rebind.test", "127.0.0.1"], &[])));
    let out = curl(&["-x", &format!("http://{addr}"), &target]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello"), "{out:?}");
}

/// Grants listed by the source, none deciding anything (the 403's list is what is tested).
struct ListedGrants;

impl sandgate_proxy::GrantSource for ListedGrants {
    fn grant_for<'a>(
        &'a self,
        _sandbox: &'a SandboxId,
        _target: &'a Target,
    ) -> BoxFuture<'a, Option<Arc<Rule>>> {
        Box::pin(async { None })
    }

    fn listed(&self, sandbox: &SandboxId) -> Vec<String> {
        vec![format!("pypi.org:443 (for {sandbox})")]
    }
}

/// Issue 32, part 3: the 403's "Allowed destinations" names the sandbox's grants too, on every
/// path a refusal takes (a plain request, a tunnel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_lists_the_grants_among_the_allowed_destinations() {
    let p =
        Proxy::builder().resolver(Arc::new(TestResolver)).grants(Arc::new(ListedGrants)).build();
    let addr = serve(&p, "s1", policy(&["crates.io"], &["denied.test"])).await;
    let want = "Allowed destinations: crates.io, pypi.org:443 (for s1) (granted).";
    let out = curl(&["-i", "-x", &format!("http://{addr}"), "http://denied.test/x"]).await;
    assert!(out.stdout.contains(want), "{out:?}");
    let raw = raw(addr, b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(raw.contains(want), "{raw}");
}

/// Issue 32, part 3: `sandgate learn` hears of what the address guard refused (allowing those
/// names would not help), whether the name was allowed by a rule or by the learner's answer; a
/// refused name is not reported when its address is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_learner_hears_of_guard_refusals() {
    let origin = http_origin().await;
    let learner = Arc::new(sandgate_proxy::Learner::new(true));
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(learner.clone()).build();
    let addr = serve(&p, "s1", policy(&["ruled.test"], &[])).await;
    for host in ["ruled.test", "asked.test"] {
        let out =
            curl(&["-i", "-x", &format!("http://{addr}"), &url(host, origin.port(), "/")]).await;
        assert!(out.stdout.starts_with("HTTP/1.1 403"), "{host}: {out:?}");
        assert!(out.stdout.contains("`sandgate allow 127.0.0.1:"), "{host}: {out:?}");
    }
    let refused: Vec<(String, u16, String, String)> = learner
        .guard_refusals()
        .into_iter()
        .map(|r| (r.host, r.port, r.ip.to_string(), r.why))
        .collect();
    let row =
        |h: &str| (h.to_owned(), origin.port(), "127.0.0.1".into(), "a loopback address".into());
    assert_eq!(refused, [row("asked.test"), row("ruled.test")]);
    assert_eq!(learner.seen(), [("asked.test".to_owned(), origin.port())], "only one was asked");
    // Control: with the address itself allowed, nothing is refused and nothing is reported.
    let learner = Arc::new(sandgate_proxy::Learner::new(true));
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(learner.clone()).build();
    let addr = serve(&p, "s2", policy(&["ruled.test", "127.0.0.1"], &[])).await;
    let out =
        curl(&["-x", &format!("http://{addr}"), &url("ruled.test", origin.port(), "/")]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(learner.guard_refusals().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sni_that_differs_from_the_connect_host_must_itself_be_allowed() {
    let tls = tls_origin(&["allowed.test", "also.test", "forbidden.test"]).await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "also.test", "127.0.0.1"], &[])).await;
    let port = tls.addr.port();
    let via = |sni_host: &str| {
        // curl sends CONNECT allowed.test:PORT but the ClientHello names `sni_host`.
        vec![
            "-x".to_owned(),
            format!("http://{addr}"),
            "--cacert".into(),
            tls.ca_file.to_str().unwrap().to_owned(),
            "--connect-to".into(),
            format!("{sni_host}:{port}:allowed.test:{port}"),
            format!("https://{sni_host}:{port}/"),
        ]
    };
    let args = via("forbidden.test");
    let out = curl(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_ne!(out.code, 0, "{out:?}");
    let ev = wait_for(|| events.all().into_iter().find(|e| e.decision == Outcome::Deny)).await;
    assert_eq!(ev.host, "allowed.test");
    assert!(ev.rule.contains("TLS server name forbidden.test differs"), "{ev:?}");

    let args = via("also.test");
    let out = curl(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello to / at also.test"), "{out:?}");
}

/// Answers only when told to, counting the questions.
struct Gate {
    asked: AtomicUsize,
    release: Notify,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate { asked: AtomicUsize::new(0), release: Notify::new() })
    }
}

impl Approver for Gate {
    fn ask(&self, q: ApprovalRequest) -> BoxFuture<'_, Ruling> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            self.release.notified().await;
            let pattern = DomainPattern::parse(&q.target.host.to_string(), PatternUse::Allow);
            Ruling::Allow(Arc::new(Rule {
                pattern: pattern.ok(),
                source: RuleSource::Grant("g-1".into()),
            }))
        })
    }
}

async fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "condition not reached within 20s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_released_by_an_approval() {
    let origin = http_origin().await;
    let gate = Gate::new();
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(gate.clone()).build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let target = Target::parse(&format!("ask.test:{}", origin.port())).unwrap();
    let proxy_url = format!("http://{addr}");
    let url = url("ask.test", origin.port(), "/held");
    let request = tokio::spawn(async move { curl(&["-x", &proxy_url, &url]).await });
    wait_for(|| (p.waiting(&SandboxId::new("s1"), &target) == 1).then_some(())).await;
    gate.release.notify_one();
    let out = request.await.unwrap();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello to /held"), "{out:?}");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_denied_when_nobody_answers_in_time() {
    let gate = Gate::new();
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .approver(gate.clone())
        .config(ProxyConfig { ask_timeout: Duration::from_millis(300), ..ProxyConfig::default() })
        .build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let out = curl(&["-i", "-x", &format!("http://{addr}"), "http://slow.test/"]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 403"), "{out:?}");
    assert!(out.stdout.contains("x-sandgate-decision: deny; rule=approval timed out"), "{out:?}");
    assert!(out.stdout.contains("(the request timed out)"), "{out:?}");
    // The port asked: a bare host would grant 443.
    assert!(out.stdout.contains("`sandgate allow slow.test:80`"), "{out:?}");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_can_deny_a_held_request() {
    struct No;
    impl Approver for No {
        fn ask(&self, _: ApprovalRequest) -> BoxFuture<'_, Ruling> {
            Box::pin(async { Ruling::Deny(DenyReason::Denied) })
        }
    }
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(Arc::new(No)).build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let resp = raw(addr, b"CONNECT nope.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(resp.contains("deny; rule=denied by a person"), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_requests_for_one_host_ask_one_question() {
    let origin = http_origin().await;
    let gate = Gate::new();
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(gate.clone()).build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let target = Target::parse(&format!("many.test:{}", origin.port())).unwrap();
    let mut args: Vec<String> = vec![
        "-Z".into(),
        "--parallel-immediate".into(),
        "--parallel-max".into(),
        "100".into(),
        "-x".into(),
        format!("http://{addr}"),
        "-w".into(),
        "%{http_code}\n".into(),
    ];
    for i in 0..100 {
        args.extend([
            "-o".into(),
            "/dev/null".into(),
            url("many.test", origin.port(), &format!("/{i}")),
        ]);
    }
    let request =
        tokio::spawn(
            async move { curl(&args.iter().map(String::as_str).collect::<Vec<_>>()).await },
        );
    wait_for(|| (p.waiting(&SandboxId::new("s1"), &target) == 100).then_some(())).await;
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
    gate.release.notify_one();
    let out = request.await.unwrap();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().filter(|l| *l == "200").count(), 100, "{out:?}");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_token_is_required_when_configured() {
    let origin = http_origin().await;
    let p = proxy();
    let addr = serve_ctx(
        &p,
        SandboxContext {
            id: SandboxId::new("s1"),
            policy: policy(&["allowed.test", "127.0.0.1"], &[]),
            token: Some(ProxyToken::new("s3cret")),
        },
    )
    .await;
    let target = url("allowed.test", origin.port(), "/");
    let out = curl(&["-i", "-x", &format!("http://{addr}"), &target]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 407"), "{out:?}");
    assert!(out.stdout.contains("proxy-authenticate: Basic realm=\"sandgate\""), "{out:?}");
    let out = curl(&["-x", &format!("http://sandbox:s3cret@{addr}"), &target]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.ends_with("(proxy-authorization leaked: false)"), "{out:?}");
    let resp = raw(addr, b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 407"), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_gets_a_502_that_says_so() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let p = proxy();
    let addr = serve(&p, "s1", policy(&["down.test", "127.0.0.1"], &[])).await;
    let out = curl(&["-i", "-x", &format!("http://{addr}"), &url("down.test", port, "/")]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 502"), "{out:?}");
    assert!(out.stdout.contains("could not be reached"), "{out:?}");
    assert!(out.stdout.contains("this is not a policy decision"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .config(ProxyConfig {
            header_timeout: Duration::from_millis(300),
            ..ProxyConfig::default()
        })
        .build();
    let addr = serve(&p, "s1", policy(&["allowed.test"], &[])).await;
    for partial in [
        &b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: a"[..],
        b"GET http://allowed.test/ HTTP/1.1\r\n",
    ] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(partial).await.unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the proxy must close a slow client")
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert!(started.elapsed() >= Duration::from_millis(250));
    }
}

/// HTTPS clients show only the status line of a refused CONNECT (curl: `CONNECT tunnel failed,
/// response 403`), so the reason phrase itself says that sandgate blocked it and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_shows_that_sandgate_blocked_a_connect() {
    let p = proxy();
    let addr = serve(&p, "s1", policy(&["allowed.test"], &["evil.test"])).await;
    let proxy_url = format!("http://{addr}");
    let out = curl(&["-v", "-x", &proxy_url, "https://evil.test:443/"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("403 Blocked by sandgate: deny rule"), "{}", out.stderr);
    // curl 7.88 prints the phrase only with -v ("CONNECT tunnel failed, response 403" without);
    // Python's http.client (under pip, requests, urllib3) puts it in its error message.
    let py = format!(
        "import http.client\nc = http.client.HTTPSConnection('{}', {})\n\
         c.set_tunnel('unknown.test', 443)\nc.connect()\n",
        addr.ip(),
        addr.port()
    );
    let out = tokio::process::Command::new("python3").args(["-c", &py]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Tunnel connection failed: 403 Blocked by sandgate: not in allowlist"),
        "{stderr}"
    );
    // Plain HTTP goes through hyper's server: the same phrase.
    let out = curl(&["-i", "-x", &proxy_url, "http://evil.test/"]).await;
    assert!(
        out.stdout.starts_with("HTTP/1.1 403 Blocked by sandgate: deny rule\r\n"),
        "{}",
        out.stdout
    );
}

/// The `Host` header sent upstream is made from the decided target: however the client spells
/// the URL's host (case, trailing dot) and whatever its own `Host` header says, the origin sees
/// the normalised name that was decided, never another host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_header_sent_upstream_names_the_decided_host() {
    let origin = http_origin().await;
    let port = origin.port();
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    for (url_host, host_header) in [
        ("allowed.test", "evil.test"),
        ("allowed.test.", "allowed.test."),
        ("ALLOWED.Test", "ALLOWED.Test"),
        ("Allowed.TEST.", "evil.test:80"),
        ("allowed.test", "allowed.test\r\nHost: evil.test"),
    ] {
        let req = format!(
            "GET http://{url_host}:{port}/h HTTP/1.1\r\nHost: {host_header}\r\n\
             Connection: close\r\n\r\n"
        );
        let out = raw(addr, req.as_bytes()).await;
        let seen = out.split_once(" at ").map(|(_, r)| r.split(' ').next().unwrap_or(""));
        // hyper answers a request with two Host headers itself (400): nothing goes upstream.
        if out.starts_with("HTTP/1.1 400") {
            assert!(!out.contains("origin says"), "{out}");
            continue;
        }
        assert_eq!(seen, Some(format!("allowed.test:{port}").as_str()), "{url_host}: {out}");
    }
}

/// A CONNECT that follows a plain request on the same keep-alive connection gets the one tunnel
/// path, and bytes the client sent right behind the CONNECT head (in the same write) reach the
/// upstream first, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_on_a_keep_alive_connection_keeps_the_bytes_sent_behind_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = http_origin().await;
    let port = origin.port();
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let first = format!(
        "GET http://allowed.test:{port}/one HTTP/1.1\r\nHost: allowed.test\r\n\r\n\
         CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n\
         GET /two HTTP/1.1\r\nHost: inner.test\r\nConnection: close\r\n\r\n"
    );
    s.write_all(first.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("origin says hello to /one at allowed.test"), "{out}");
    assert_eq!(out.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{out}");
    // Inside the tunnel, plain HTTP reaches the CONNECT host's site whatever `Host` it wrote.
    assert!(out.contains(&format!("origin says hello to /two at allowed.test:{port} ")), "{out}");
    drop(s); // the tunnel ends (and is logged) when both sides are done
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 2).then_some(all)
    })
    .await;
    let connect = ev.iter().find(|e| e.method == "CONNECT").expect("a CONNECT event");
    assert_eq!(connect.decision, Outcome::Allow, "{ev:?}");
    assert!(connect.bytes_up > 40 && connect.bytes_down > 40, "{ev:?}");
}

/// Forwarded requests reuse upstream keep-alive connections (the request that holds one drives
/// it, then gives it back), and a large response streams through whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_reuses_upstream_connections_and_streams_large_bodies() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: hyper::Request<_>| async move {
                    let n: usize = req.uri().path().trim_start_matches('/').parse().unwrap_or(5);
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from(vec![b'x'; n])),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let proxy = format!("http://{addr}");
    for n in [5, 3_000_000, 0, 7] {
        let out = curl(&["-x", &proxy, &url("allowed.test", port, &format!("/{n}"))]).await;
        assert_eq!(out.code, 0, "{n}: {}", out.stderr);
        assert_eq!(out.stdout.len(), n, "{n}");
    }
    // Sequential requests from four client connections: one upstream connection served them all.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 4).then_some(all)
    })
    .await;
    assert!(ev.iter().any(|e| e.bytes_down == 3_000_000), "{ev:?}");
}

/// An upstream that closes its keep-alive connections after every response (without saying
/// so): the pooled connection is found dead and the request goes out on a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_upstream_closed_is_replaced() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                // Closed here, though the response promised keep-alive.
            });
        }
    });
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let proxy = format!("http://{addr}");
    for i in 0..5 {
        let out = curl(&["-x", &proxy, &url("allowed.test", port, "/")]).await;
        assert_eq!((out.code, out.stdout.as_str()), (0, "ok"), "request {i}: {}", out.stderr);
    }
}

/// A refusal is recorded before the client can read it, and once: a launcher following the
/// events says "denied" on the command's stderr, and must hear of it before the command (which
/// has read its 403) can have ended. The sink here takes 50 ms per event, so an event recorded
/// after the answer was written would be missing when the client has read it; the client is a
/// thread of its own with blocking sockets (a tokio task could wait behind the sink on the
/// proxy's worker). Control: with the order before this test (the answer first), each case
/// failed on its own. Cases: a plain-HTTP request (the relay), a CONNECT (the proxy's own head
/// reader), a SOCKS5 CONNECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_recorded_before_the_client_reads_it() {
    use std::io::{Read as _, Write as _};
    let events = Arc::new(SlowEvents::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &["denied.test"])).await;
    let socks_connect = {
        let mut r = vec![0x05, 0x01, 0x00, 0x03, 11];
        r.extend_from_slice(b"denied.test");
        r.extend_from_slice(&443u16.to_be_bytes());
        r
    };
    let cases: [(&str, Vec<u8>, usize); 3] = [
        ("relay", b"GET http://denied.test/x HTTP/1.1\r\nHost: denied.test\r\n\r\n".to_vec(), 12),
        (
            "connect",
            b"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n".to_vec(),
            12,
        ),
        ("socks", socks_connect, 4),
    ];
    for (case, request, answer_len) in cases {
        let events = events.clone();
        tokio::task::spawn_blocking(move || {
            let before = events.0.all().len();
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            if case == "socks" {
                s.write_all(&[0x05, 0x01, 0x00]).unwrap();
                let mut method = [0u8; 2];
                s.read_exact(&mut method).unwrap();
                assert_eq!(method, [0x05, 0x00], "{case}");
            }
            s.write_all(&request).unwrap();
            let mut answer = vec![0u8; answer_len];
            s.read_exact(&mut answer).unwrap();
            let all = events.0.all();
            assert_eq!(
                all.len(),
                before + 1,
                "{case}: no event yet when the client read {answer:?}"
            );
            let ev = all.last().unwrap();
            assert_eq!((ev.host.as_str(), ev.decision), ("denied.test", Outcome::Deny), "{case}");
            drop(s);
            // Once, not again when the connection ends.
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(events.0.all().len(), before + 1, "{case}: recorded twice");
        })
        .await
        .unwrap();
    }
}
