//! Stage `intercept`: for a host a secret or an HTTP rule names, the proxy terminates the
//! client's TLS with a leaf of the local CA ([`crate::ca`]), checks each request against the
//! host's `[[http_rules]]`, puts secrets in place of their placeholders, and sends the request
//! over its own TLS connection to the upstream, whose certificate it verifies against the
//! system's roots and `[tls] extra_roots`.
//!
//! What it keeps from a plain tunnel: the upstream is the one `connect` reached at checked
//! addresses, and the upstream's server name is the CONNECT host (the client's SNI plays no part,
//! so there is nothing to front). HTTP/1.1 only (keep-alive, chunked and streamed bodies, upgrades
//! such as WebSocket); HTTP/2 end to end when both sides speak it: the
//! client's hello is read first, `h2` is offered to the upstream only when the client offers it,
//! and to the client only when the upstream chose it (so the two sides always speak the same
//! version and no request is translated between them).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use sandgate_config::{NetworkPolicy, Secret, Target};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::client::TlsStream;

use crate::attribution::Attribution;
use crate::ctx::Ctx;
use crate::denial::Refusal;
use crate::forward::{Counted, Pending, refusal_response, strip_hop_by_hop};
use crate::pool::Body;
use crate::proxy::{ProxyShared, Sandbox};
use crate::reflect::redact;
use crate::secret::{SecretValue, placeholder_note, placeholders_seen};
use crate::traits::{Outcome, ProxyEvent};

pub use crate::interceptor::{CA_BUNDLE_VARS, Interceptor, sandbox_bundle, system_roots_pem};

/// The authority an intercepted request names upstream: the tunnel's host, with its port unless
/// it is HTTPS's 443.
fn tls_authority(target: &Target) -> String {
    if target.port == 443 { target.host.to_string() } else { target.to_string() }
}

/// Headers that make common servers run another method than the request's (Google APIs,
/// ASP.NET, Symfony, Express `method-override`, Rack).
const METHOD_OVERRIDE_HEADERS: [&str; 3] =
    ["x-http-method-override", "x-http-method", "x-method-override"];

/// The methods a request asks a server to run instead of its own: the override headers' values
/// and a `_method` query parameter (Rails, Laravel, Symfony), upper-cased as those servers do. A
/// value that is not a plain word is kept as it is, so it matches no method rule.
fn method_overrides(uri: &hyper::Uri, headers: &hyper::HeaderMap) -> Vec<String> {
    let mut out: Vec<String> = METHOD_OVERRIDE_HEADERS
        .iter()
        .flat_map(|h| headers.get_all(*h))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_uppercase())
        .collect();
    for pair in uri.query().unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = k.to_ascii_lowercase();
        if k == "_method" || k == "%5fmethod" {
            out.push(v.trim().to_ascii_uppercase());
        }
    }
    out
}

/// Puts `value` in place of `secret`'s placeholder: in its header (or adds the header, written
/// with `format`), and with `anywhere` in every header and the query string.
fn inject(parts: &mut hyper::http::request::Parts, secret: &Secret, value: &SecretValue) {
    let ph = secret.placeholder();
    let Ok(name) = HeaderName::from_bytes(secret.header.as_bytes()) else { return };
    let swap = |v: &HeaderValue| -> Option<HeaderValue> {
        let text = v.to_str().ok()?;
        if !text.contains(&ph) {
            return None;
        }
        let mut hv = HeaderValue::from_str(&text.replace(&ph, value.expose())).ok()?;
        hv.set_sensitive(true);
        Some(hv)
    };
    match parts.headers.get(&name) {
        Some(v) => {
            if let Some(new) = swap(v) {
                parts.headers.insert(name.clone(), new);
            }
        }
        None => {
            if let Ok(mut hv) = HeaderValue::from_str(&secret.format.replace("{}", value.expose()))
            {
                hv.set_sensitive(true);
                parts.headers.insert(name.clone(), hv);
            }
        }
    }
    if !secret.anywhere {
        return;
    }
    let names: Vec<HeaderName> = parts.headers.keys().cloned().collect();
    for n in names {
        let values: Vec<HeaderValue> = parts.headers.get_all(&n).iter().cloned().collect();
        if values.iter().any(|v| v.to_str().is_ok_and(|t| t.contains(&ph))) {
            parts.headers.remove(&n);
            for v in values {
                parts.headers.append(n.clone(), swap(&v).unwrap_or(v));
            }
        }
    }
    if let Some(q) = parts.uri.query()
        && q.contains(&ph)
    {
        let pq = parts.uri.path_and_query().map_or("", |p| p.as_str()).replace(&ph, value.expose());
        let mut uri = parts.uri.clone().into_parts();
        if let Ok(p) = pq.parse() {
            uri.path_and_query = Some(p);
            if let Ok(u) = hyper::Uri::from_parts(uri) {
                parts.uri = u;
            }
        }
    }
}

/// One intercepted client connection.
struct Conn {
    inner: Arc<ProxyShared>,
    sandbox: Arc<Sandbox>,
    policy: Arc<NetworkPolicy>,
    target: Target,
    addrs: Vec<SocketAddr>,
    rule: String,
    /// Whether both sides speak HTTP/2 (the client was offered `h2` because the upstream chose it).
    h2: bool,
    /// The first upstream connection (made before the client's handshake), then later ones.
    upstream: tokio::sync::Mutex<Upstream>,
    /// The lookup of the process that opened the tunnel.
    process: Attribution,
}

enum Upstream {
    /// TLS done, HTTP not started.
    Fresh(Box<TlsStream<TcpStream>>),
    /// In use, HTTP/1.1: one request at a time.
    Ready(SendRequest<Body>),
    /// In use, HTTP/2: requests share it.
    Ready2(hyper::client::conn::http2::SendRequest<Body>),
    /// The handshake failed: every request gets this.
    Failed(Refusal),
    /// Closed: a new one is made for the next request.
    None,
}

impl Conn {
    async fn request(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let mut draft = Ctx::new(self.sandbox.clone(), req.method().as_str(), Instant::now())
            .with_process(&self.process);
        draft.set_target(self.target.clone());
        draft.event.decision = Outcome::Allow;
        draft.event.rule = self.rule.clone();
        // The event is recorded when both bodies are done with, with their byte counts (as for
        // plain HTTP).
        let pending = Arc::new(Pending {
            inner: self.inner.clone(),
            ctx: Mutex::new(None),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        });
        match self.exchange(req, &mut draft, &pending).await {
            Ok(resp) => {
                *pending.ctx.lock().unwrap_or_else(|e| e.into_inner()) = Some(draft);
                let (parts, body) = resp.into_parts();
                let body = Counted::new(body, pending, true, None);
                Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
            }
            Err(r) => {
                draft.refused(&r);
                self.inner.logging(draft);
                let granted = self.inner.granted(&self.sandbox);
                let mut resp = refusal_response(&r, &self.policy, &granted);
                if r.status() == 502 {
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                resp
            }
        }
    }

    async fn exchange(
        &self,
        mut req: Request<Incoming>,
        draft: &mut Ctx,
        pending: &Arc<Pending>,
    ) -> Result<Response<Body>, Refusal> {
        let settings = self.policy.intercept().clone();
        let method = req.method().as_str().to_owned();
        // Only origin-form paths (or absolute form, whose authority is dropped below): a CONNECT
        // or `OPTIONS *` inside the tunnel has no path the rules could judge.
        let Some(pq) = req.uri().path_and_query().filter(|pq| pq.as_str().starts_with('/')) else {
            return Err(Refusal::Malformed {
                input: crate::denial::quote(req.uri().to_string().as_bytes()),
                why: "inside an intercepted tunnel a request names a path starting with '/'".into(),
            });
        };
        let pq = pq.clone();
        self.inner
            .http_rules(
                &self.sandbox,
                &self.policy,
                &self.target,
                &method,
                req.uri(),
                req.headers(),
                &mut draft.event,
                &self.process,
            )
            .await?;
        // After an upgrade the connection is bytes the rules never read: on a host with rules
        // only WebSocket (whose frames a server does not take for requests) may be upgraded to,
        // never `h2c` or anything else that speaks HTTP again.
        if settings.rules_for(&self.target).is_some()
            && let Some(up) = req.headers().get(header::UPGRADE)
            && !(req.headers().get_all(header::UPGRADE).iter().count() == 1
                && up.as_bytes().eq_ignore_ascii_case(b"websocket"))
        {
            return Err(Refusal::Malformed {
                input: crate::denial::quote(up.as_bytes()),
                why: "on a host with HTTP rules only an upgrade to websocket is allowed".into(),
            });
        }
        let client_upgrade =
            req.headers().contains_key(header::UPGRADE).then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let upgrade_headers = client_upgrade.as_ref().map(|_| {
            (
                parts.headers.get(header::CONNECTION).cloned(),
                parts.headers.get(header::UPGRADE).cloned(),
            )
        });
        let icpt = self.inner.interceptor.as_ref().ok_or_else(|| Refusal::Unreachable {
            target: self.target.to_string(),
            error: "interception has no CA".into(),
        })?;
        let mut injected = Vec::new();
        for secret in settings.secrets_for(&self.target) {
            let value = icpt.secrets().read(secret).await.map_err(|e| {
                Refusal::SecretUnavailable { target: self.target.to_string(), why: e.to_string() }
            })?;
            inject(&mut parts, secret, &value);
            injected.push((value, secret.placeholder()));
        }
        draft.event.secrets_injected = u32::try_from(injected.len()).unwrap_or(u32::MAX);
        let seen = placeholders_seen(&parts);
        if !seen.is_empty() {
            draft.event.rule.push_str(&placeholder_note(&seen));
        }
        // gRPC over HTTP/2 needs `te: trailers`, the one TE value HTTP/2 allows.
        let te_trailers = self.h2
            && parts
                .headers
                .get(header::TE)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
        strip_hop_by_hop(&mut parts.headers);
        if te_trailers {
            parts.headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        if let Some((conn, up)) = upgrade_headers {
            if let Some(c) = conn {
                parts.headers.insert(header::CONNECTION, c);
            }
            if let Some(u) = up {
                parts.headers.insert(header::UPGRADE, u);
            }
        }
        // The request names the tunnel's host, whatever the client wrote (Host, an absolute-form
        // target, HTTP/2 :authority): a server or CDN in front of several sites routes by that
        // name, and the secret and the rules were decided for this host alone.
        let authority = tls_authority(&self.target);
        // After `inject`, which may have put a value in the query string.
        let pq = parts.uri.path_and_query().cloned().unwrap_or(pq);
        let malformed = |e: &dyn std::fmt::Display| Refusal::Malformed {
            input: crate::denial::quote(authority.as_bytes()),
            why: e.to_string(),
        };
        if self.h2 {
            parts.uri = hyper::Uri::builder()
                .scheme("https")
                .authority(authority.as_str())
                .path_and_query(pq)
                .build()
                .map_err(|e| malformed(&e))?;
            parts.headers.remove(header::HOST);
            parts.version = Version::HTTP_2;
        } else {
            parts.uri = hyper::Uri::from(pq);
            let host = HeaderValue::from_str(&authority).map_err(|e| malformed(&e))?;
            parts.headers.insert(header::HOST, host);
            parts.version = Version::HTTP_11;
        }
        let body = Counted::new(body, pending.clone(), false, None);
        let req = Request::from_parts(parts, http_body_util::BodyExt::boxed(body));
        let mut resp = self.send(req).await?;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                if let (Ok(c), Ok(u)) = (client_upgrade.await, upstream_upgrade.await) {
                    let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                }
            });
            let (mut parts, _) = resp.into_parts();
            redact(&mut parts.headers, &injected);
            return Ok(Response::from_parts(parts, crate::forward::full(bytes::Bytes::new())));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        redact(&mut parts.headers, &injected);
        Ok(Response::from_parts(parts, http_body_util::BodyExt::boxed(body)))
    }

    async fn send(&self, mut req: Request<Body>) -> Result<Response<Incoming>, Refusal> {
        let unreachable = |e: &dyn std::fmt::Display| Refusal::Unreachable {
            target: self.target.to_string(),
            error: e.to_string(),
        };
        let mut up = self.upstream.lock().await;
        for _attempt in 0..2 {
            let mut sender = match std::mem::replace(&mut *up, Upstream::None) {
                Upstream::Ready(s) if !s.is_closed() => s,
                Upstream::Ready2(s) if !s.is_closed() => {
                    // Shared: the lock is not held while this request runs.
                    *up = Upstream::Ready2(s.clone());
                    drop(up);
                    let mut s = s;
                    s.ready().await.map_err(|e| unreachable(&e))?;
                    return s.send_request(req).await.map_err(|e| unreachable(&e));
                }
                Upstream::Failed(r) => {
                    let again = match &r {
                        Refusal::UpstreamCertificate { target, why } => {
                            Refusal::UpstreamCertificate {
                                target: target.clone(),
                                why: why.clone(),
                            }
                        }
                        other => unreachable(&other.rule_text()),
                    };
                    *up = Upstream::Failed(r);
                    return Err(again);
                }
                Upstream::Fresh(tls) if self.h2 => {
                    *up = Upstream::Ready2(handshake2(*tls).await.map_err(|e| unreachable(&e))?);
                    continue;
                }
                Upstream::Fresh(tls) => handshake(*tls).await.map_err(|e| unreachable(&e))?,
                Upstream::Ready(_) | Upstream::Ready2(_) | Upstream::None => {
                    let icpt =
                        self.inner.interceptor.as_ref().ok_or_else(|| unreachable(&"no CA"))?;
                    let tcp = self.inner.connect(&self.target, &self.addrs).await?;
                    let tls = icpt
                        .upstream_tls(
                            self.policy.intercept(),
                            &self.target,
                            tcp,
                            self.inner.config.connect_timeout,
                            self.h2,
                        )
                        .await?;
                    if self.h2 {
                        *up = Upstream::Ready2(handshake2(tls).await.map_err(|e| unreachable(&e))?);
                        continue;
                    }
                    handshake(tls).await.map_err(|e| unreachable(&e))?
                }
            };
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    *up = Upstream::Ready(sender);
                    return Ok(resp);
                }
                // Closed before the request went out: once more on a new connection.
                Err(mut e) => match e.take_message() {
                    Some(r) => req = r,
                    None => return Err(unreachable(&e.into_error())),
                },
            }
        }
        Err(unreachable(&"the upstream closed the connection"))
    }
}

async fn handshake2(
    tls: TlsStream<TcpStream>,
) -> Result<hyper::client::conn::http2::SendRequest<Body>, hyper::Error> {
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(tls))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "intercepted upstream HTTP/2 connection ended");
        }
    });
    Ok(sender)
}

async fn handshake(tls: TlsStream<TcpStream>) -> Result<SendRequest<Body>, hyper::Error> {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "intercepted upstream connection ended");
        }
    });
    Ok(sender)
}

impl ProxyShared {
    /// Whether a tunnel to `target` goes through [`serve`] instead of a splice.
    pub(crate) fn intercepts(&self, policy: &NetworkPolicy, target: &Target) -> bool {
        policy.intercept().intercepts(target)
    }

    /// The host's `[[http_rules]]` for one request (intercepted or plain HTTP): the matching
    /// rule is added to the event; no match asks a person or refuses.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn http_rules(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
        method: &str,
        uri: &hyper::Uri,
        headers: &hyper::HeaderMap,
        event: &mut ProxyEvent,
        process: &Attribution,
    ) -> Result<(), Refusal> {
        let settings = policy.intercept();
        let Some(rules) = settings.rules_for(target) else { return Ok(()) };
        let path = uri.path();
        // A server that honours a method override runs that method instead of the one sent, one
        // that does not runs the one sent: both must be allowed.
        let overrides = method_overrides(uri, headers);
        for method in std::iter::once(method).chain(overrides.iter().map(String::as_str)) {
            match rules.allow.iter().find(|r| r.matches(method, path)) {
                Some(rule) => {
                    event.rule.push_str(&format!(" + http rule {rule} ({})", rules.origin));
                }
                None => self.ask_request(sandbox, target, method, path, rules, process).await?,
            }
        }
        Ok(())
    }
}

/// Stage `intercept` of an admitted, connected CONNECT tunnel, once the client has been told it
/// is open: TLS with the client (leaf of the CA) and with the upstream (verified), then HTTP/1.1
/// requests through the rules and the secrets. Replaces `sni_filter` and `tunnel` for the host.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<C>(
    inner: Arc<ProxyShared>,
    sandbox: Arc<Sandbox>,
    policy: Arc<NetworkPolicy>,
    target: Target,
    client: C,
    upstream: TcpStream,
    addrs: Vec<SocketAddr>,
    event: &mut ProxyEvent,
    process: Attribution,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    event.rule.push_str(" (intercepted)");
    let Some(icpt) = inner.interceptor.clone() else {
        // Rules or secrets name the host but no CA is loaded: closed, never a plain tunnel
        // (that would skip the rules).
        event.error =
            Some("interception is configured for this host, but the proxy has no CA".into());
        return;
    };
    // The client's hello first: `h2` is offered upstream only when the client offers it, and to
    // the client only when the upstream chose it.
    let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
    let start = match tokio::time::timeout(inner.config.header_timeout, hello).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => {
            event.error = Some(format!("the client did not open TLS: {e}"));
            return;
        }
        Err(_) => {
            event.error = Some("the client's TLS hello did not come in time".into());
            return;
        }
    };
    let client_h2 = start.client_hello().alpn().is_some_and(|mut a| a.any(|p| p == b"h2"));
    let timeout = inner.config.connect_timeout;
    let (first, h2) =
        match icpt.upstream_tls(policy.intercept(), &target, upstream, timeout, client_h2).await {
            Ok(tls) => {
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                (Upstream::Fresh(Box::new(tls)), h2)
            }
            Err(r) => {
                event.error = Some(r.rule_text() + ": " + &refusal_detail(&r));
                (Upstream::Failed(r), false)
            }
        };
    let config = match icpt.server_config(&target.host, h2) {
        Ok(c) => c,
        Err(e) => {
            event.error = Some(format!("no leaf certificate for {}: {e}", target.host));
            return;
        }
    };
    let accept = start.into_stream(config);
    let tls = match tokio::time::timeout(inner.config.header_timeout, accept).await {
        Ok(Ok(s)) => s,
        Err(_) => {
            event.error = Some("the client's TLS handshake did not complete in time".into());
            return;
        }
        Ok(Err(e)) => {
            event.error = Some(format!(
                "the client's TLS handshake failed (does it trust sandgate's CA bundle?): {e}"
            ));
            return;
        }
    };
    let conn = Arc::new(Conn {
        inner: inner.clone(),
        sandbox,
        policy,
        target,
        addrs,
        rule: event.rule.clone(),
        h2,
        upstream: tokio::sync::Mutex::new(first),
        process,
    });
    let svc = hyper::service::service_fn(move |req| {
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(conn.request(req).await) }
    });
    let served = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(tls), svc)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(inner.config.idle_timeout)
            .serve_connection(TokioIo::new(tls), svc)
            .with_upgrades()
            .await
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "intercepted client connection ended");
    }
}

fn refusal_detail(r: &Refusal) -> String {
    match r {
        Refusal::UpstreamCertificate { why, .. } => why.clone(),
        other => other.rule_text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(header: &str, anywhere: bool) -> Secret {
        Secret {
            name: "k".into(),
            hosts: Vec::new(),
            header: header.into(),
            format: "Bearer {}".into(),
            env: None,
            anywhere,
            source: sandgate_config::SecretSource::Env("X".into()),
            origin: sandgate_config::Origin { path: "/c".into(), line: 1 },
        }
    }

    fn parts(headers: &[(&str, &str)], uri: &str) -> hyper::http::request::Parts {
        let mut b = Request::get(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn injection_replaces_the_placeholder_where_configured() {
        let value = SecretValue::for_test("REAL");
        let ph = "sandgate-placeholder-k";
        // In the named header, the placeholder becomes the value.
        let mut p = parts(
            &[("authorization", &format!("Bearer {ph}")), ("x-other", ph)],
            &format!("/x?key={ph}"),
        );
        inject(&mut p, &secret("Authorization", false), &value);
        assert_eq!(p.headers["authorization"], "Bearer REAL");
        assert_eq!(p.headers["x-other"], ph, "elsewhere only with anywhere");
        assert_eq!(p.uri.query(), Some(&*format!("key={ph}")));
        assert_eq!(placeholders_seen(&p), ["k"]);
        // Without the header, it is added in its format; another value is left alone.
        let mut p = parts(&[], "/x");
        inject(&mut p, &secret("Authorization", false), &value);
        assert_eq!(p.headers["authorization"], "Bearer REAL");
        let mut p = parts(&[("authorization", "Bearer mine")], "/x");
        inject(&mut p, &secret("Authorization", false), &value);
        assert_eq!(p.headers["authorization"], "Bearer mine");
        // anywhere: every header and the query string.
        let mut p =
            parts(&[("x-key", ph), ("x-other", &format!("a {ph} b"))], &format!("/x?key={ph}&y=1"));
        inject(&mut p, &secret("x-key", true), &value);
        assert_eq!(p.headers["x-key"], "REAL");
        assert_eq!(p.headers["x-other"], "a REAL b");
        assert_eq!(p.uri.query(), Some("key=REAL&y=1"));
        assert!(placeholders_seen(&p).is_empty());
    }

    #[test]
    fn placeholders_are_found_by_name() {
        let names: Vec<&str> = crate::secret::placeholders_in(
            "Bearer sandgate-placeholder-openai, x=sandgate-placeholder-gh_1&y",
        )
        .collect();
        assert_eq!(names, ["openai", "gh_1"]);
    }

    #[test]
    fn method_overrides_are_read_from_headers_and_the_query() {
        for (headers, uri, want) in [
            (&[][..], "/x", &[][..]),
            (&[("x-http-method-override", " delete ")][..], "/x", &["DELETE"][..]),
            (&[("x-http-method", "PUT"), ("x-method-override", "patch")], "/x", &["PUT", "PATCH"]),
            (&[], "/x?a=1&_method=delete", &["DELETE"]),
            (&[], "/x?_METHOD=put", &["PUT"]),
            (&[], "/x?%5Fmethod=put", &["PUT"]),
            (&[], "/x?_method", &[""]),
            (&[], "/x?method=put&x_method=put", &[]),
        ] {
            let p = parts(headers, uri);
            assert_eq!(method_overrides(&p.uri, &p.headers), want, "{headers:?} {uri}");
        }
    }

    /// With no approver there is no one to ask: a request no rule allows is refused.
    #[tokio::test]
    async fn a_request_is_held_to_its_hosts_http_rules() {
        use sandgate_config::{
            DomainPattern, HttpRule, HttpRules, InterceptSettings, NetMode, Origin, PatternUse,
            SandboxId,
        };

        let rules = HttpRules {
            host: DomainPattern::parse("a.test", PatternUse::Allow).unwrap(),
            allow: vec![HttpRule::parse("GET /repos/**").unwrap()],
            origin: Origin { path: "/c.toml".into(), line: 3 },
        };
        let settings = InterceptSettings { http_rules: vec![rules], ..Default::default() };
        let policy = Arc::new(
            NetworkPolicy::new("net", NetMode::Proxy, vec![], vec![])
                .with_intercept(Arc::new(settings)),
        );
        let proxy = crate::Proxy::builder().build();
        let sandbox = proxy.register(crate::SandboxContext {
            id: SandboxId::new("t"),
            policy: policy.clone(),
            token: None,
        });
        let check = async |target: &str, method: &str, headers: &[(&str, &str)], uri: &str| {
            let p = parts(headers, uri);
            let mut ctx = Ctx::new(sandbox.clone(), method, Instant::now());
            let target = Target::parse(target).unwrap();
            let process = Attribution::none();
            let r = proxy
                .inner
                .http_rules(
                    &sandbox,
                    &policy,
                    &target,
                    method,
                    &p.uri,
                    &p.headers,
                    &mut ctx.event,
                    &process,
                )
                .await;
            (r.map_err(|e| e.rule_text()), ctx.event.rule)
        };
        let allowed = check("a.test:443", "GET", &[], "/repos/x?y=1").await;
        assert_eq!(allowed, (Ok(()), " + http rule GET /repos/** (/c.toml:3)".to_owned()));
        let (refused, _) = check("a.test:443", "POST", &[], "/repos/x").await;
        assert!(refused.is_err());
        let (refused, _) = check("a.test:443", "GET", &[], "/other").await;
        assert!(refused.is_err());
        let (overridden, _) =
            check("a.test:443", "GET", &[("x-http-method-override", "DELETE")], "/repos/x").await;
        assert!(overridden.is_err(), "the override is checked as well");
        // Another host has no rules: nothing to check.
        assert_eq!(check("b.test:443", "POST", &[], "/x").await, (Ok(()), String::new()));
    }
}
