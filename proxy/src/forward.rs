//! Plain HTTP: hyper's HTTP/1.1 server reads the requests of a connection, each goes through the
//! decision stages and is forwarded over a pooled keep-alive connection to a checked address.
//! CONNECT requests that arrive on such a connection are served through hyper's upgrade.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use sandgate_config::{NetworkPolicy, Target};
use tokio::time::Instant;

use crate::conn::{Draft, authorized};
use crate::denial::{Refusal, quote, render_refusal};
use crate::io::{ClientStream, Rewind};
use crate::proxy::{Inner, Sandbox};
use crate::tunnel::{self, Activity};

/// Body type of forwarded requests and of every response.
pub(crate) type Body = BoxBody<Bytes, hyper::Error>;

/// Most pooled connections kept per upstream address.
const POOL_PER_ADDR: usize = 64;

/// Keep-alive connections to upstream addresses (each one an address that passed the guard).
#[derive(Default)]
pub(crate) struct Pool {
    conns: Mutex<HashMap<SocketAddr, Vec<SendRequest<Body>>>>,
}

impl Pool {
    /// An idle connection to one of `addrs`, in their order.
    fn take(&self, addrs: &[SocketAddr]) -> Option<(SocketAddr, SendRequest<Body>)> {
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for addr in addrs {
            let Some(list) = map.get_mut(addr) else { continue };
            list.retain(|c| !c.is_closed());
            if let Some(i) = list.iter().position(|c| c.is_ready()) {
                return Some((*addr, list.swap_remove(i)));
            }
        }
        None
    }

    /// Keeps a connection for later (it becomes ready again once its response is read).
    fn put(&self, addr: SocketAddr, conn: SendRequest<Body>) {
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(addr).or_default();
        if list.len() < POOL_PER_ADDR {
            list.push(conn);
        }
    }
}

/// Headers that belong to one hop and are never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including those named in `Connection`, and `Upgrade`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// The event of one forwarded request, recorded when both bodies are done with.
pub(crate) struct Pending {
    pub(crate) inner: Arc<Inner>,
    pub(crate) draft: Mutex<Option<Draft>>,
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let draft = self.draft.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut d) = draft {
            d.event.bytes_up = *self.up.get_mut();
            d.event.bytes_down = *self.down.get_mut();
            d.finish(&self.inner);
        }
    }
}

/// A body that counts its data bytes and keeps the request's event alive until it is dropped.
pub(crate) struct Counted<B> {
    pub(crate) inner: B,
    pub(crate) pending: Arc<Pending>,
    pub(crate) down: bool,
}

impl<B> hyper::body::Body for Counted<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &r
            && let Some(data) = frame.data_ref()
        {
            let counter = if this.down { &this.pending.down } else { &this.pending.up };
            counter.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).map_err(|never: Infallible| match never {}).boxed()
}

pub(crate) fn refusal_response(r: &Refusal, policy: &NetworkPolicy) -> Response<Body> {
    let rendered = render_refusal(r, policy);
    let mut resp = Response::new(full(rendered.body));
    // The reason phrase is made of header-safe bytes, so this cannot fail; hyper's canonical phrase
    // would be the fallback.
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(rendered.reason.into_bytes()) {
        resp.extensions_mut().insert(reason);
    }
    *resp.status_mut() =
        hyper::StatusCode::from_u16(rendered.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    let headers = resp.headers_mut();
    for (k, v) in rendered.headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            headers.insert(k, v);
        }
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if rendered.status == 400 {
        // After a malformed request, nothing that follows on the connection can be trusted.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

impl Inner {
    /// Serves the plain-HTTP requests of one connection (the first one already read, in front).
    pub(crate) async fn serve_http(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        io: Rewind<ClientStream>,
    ) {
        let this = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            let (this, sandbox) = (this.clone(), sandbox.clone());
            async move { Ok::<_, Infallible>(this.request(sandbox, req).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.config.header_timeout)
            .max_buf_size(self.config.max_head_bytes.max(8192))
            .serve_connection(TokioIo::new(io), svc)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "client connection ended");
        }
    }

    async fn request(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        req: Request<Incoming>,
    ) -> Response<Body> {
        let policy = sandbox.policy();
        let mut draft = Draft::new(&sandbox.id, req.method().as_str(), Instant::now());
        let auth = req.headers().get(header::PROXY_AUTHORIZATION).map(|v| v.as_bytes());
        if !authorized(sandbox.token.as_ref(), auth) {
            let r = Refusal::Unauthenticated;
            draft.refused(&r);
            draft.finish(&self);
            return refusal_response(&r, &policy);
        }
        let result = if req.method() == Method::CONNECT {
            self.clone().upgrade(&sandbox, &policy, req, draft).await
        } else {
            self.clone().forward(&sandbox, &policy, req, draft).await
        };
        match result {
            Ok(resp) => resp,
            Err((r, mut draft)) => {
                draft.refused(&r);
                draft.finish(&self);
                refusal_response(&r, &policy)
            }
        }
    }

    /// Stages `decide` → `upstream_peer` → `forward` for an absolute-form request.
    async fn forward(
        self: Arc<Self>,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        req: Request<Incoming>,
        mut draft: Draft,
    ) -> Result<Response<Body>, (Refusal, Draft)> {
        let uri = req.uri().clone();
        let malformed =
            |why: String| Refusal::Malformed { input: quote(uri.to_string().as_bytes()), why };
        match uri.scheme_str() {
            None => return Err((Refusal::OriginForm, draft)),
            Some(s) if s.eq_ignore_ascii_case("http") => {}
            Some(s) if s.eq_ignore_ascii_case("https") => {
                let target = uri.authority().map(|a| a.to_string()).unwrap_or_default();
                return Err((Refusal::HttpsWithoutConnect { target }, draft));
            }
            Some(s) => {
                let why = format!("unsupported scheme {s:?}; only http:// URLs are forwarded");
                return Err((malformed(why), draft));
            }
        }
        let Some(authority) = uri.authority() else {
            return Err((malformed("the URL has no host".into()), draft));
        };
        let target = match Target::parse_authority(authority.as_str(), Some(80)) {
            Ok(t) => t,
            Err(e) => return Err((malformed(e.to_string()), draft)),
        };
        draft.target(&target);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let admitted =
            match self.admit(sandbox, policy, &target, req.method().as_str(), Some(path)).await {
                Ok(a) => a,
                Err(r) => return Err((r, draft)),
            };
        draft.event.decision = "allow";
        draft.event.rule = admitted.rule.to_string();
        // Stage `intercept` for plain HTTP: the host's `[[http_rules]]` apply here too (secrets
        // are never sent without TLS; a placeholder is noted).
        if let Err(r) = self
            .http_rules(sandbox, policy, &target, req.method().as_str(), uri.path(), &mut draft)
            .await
        {
            return Err((r, draft));
        }

        let (mut parts, body) = req.into_parts();
        let seen = crate::intercept::placeholders_seen(&parts);
        if !seen.is_empty() {
            draft.event.rule.push_str(&crate::intercept::placeholder_note(&seen));
        }
        parts.uri = match Uri::try_from(path) {
            Ok(u) => u,
            Err(e) => return Err((malformed(e.to_string()), draft)),
        };
        strip_hop_by_hop(&mut parts.headers);
        match HeaderValue::from_str(authority.as_str()) {
            Ok(host) => parts.headers.insert(header::HOST, host),
            Err(e) => return Err((malformed(e.to_string()), draft)),
        };
        parts.version = Version::HTTP_11;
        let pending = Arc::new(Pending {
            inner: self.clone(),
            draft: Mutex::new(None),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        });
        let body = Counted { inner: body, pending: pending.clone(), down: false }.boxed();
        let resp = match self.send(&target, &admitted.addrs, Request::from_parts(parts, body)).await
        {
            Ok(r) => r,
            Err(r) => return Err((r, draft)),
        };
        *pending.draft.lock().unwrap_or_else(|e| e.into_inner()) = Some(draft);
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Counted { inner: body, pending, down: true }.boxed()))
    }

    /// Sends over a pooled connection, or a new one to the first checked address that answers.
    async fn send(
        &self,
        target: &Target,
        addrs: &[SocketAddr],
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, Refusal> {
        let unreachable = |e: &dyn std::fmt::Display| Refusal::Unreachable {
            target: target.to_string(),
            error: e.to_string(),
        };
        if let Some((addr, mut conn)) = self.pool.take(addrs) {
            match conn.try_send_request(req).await {
                Ok(resp) => {
                    self.pool.put(addr, conn);
                    return Ok(resp);
                }
                // The pooled connection was closed under us before the request went out: retry
                // once on a fresh connection.
                Err(mut e) => match e.take_message() {
                    Some(r) => req = r,
                    None => return Err(unreachable(&e.into_error())),
                },
            }
        }
        let stream = self.connect(target, addrs).await?;
        let addr = stream.peer_addr().map_err(|e| unreachable(&e))?;
        let (mut conn, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = driver.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        conn.ready().await.map_err(|e| unreachable(&e))?;
        let resp = conn.send_request(req).await.map_err(|e| unreachable(&e))?;
        // A tunnel through the upstream proxy is keyed by nothing of its destination (its peer
        // is the upstream): never pooled, so it cannot be handed to a request for another host.
        if !self.via_upstream(target) {
            self.pool.put(addr, conn);
        }
        Ok(resp)
    }

    /// A CONNECT on a plain-HTTP keep-alive connection: the same stages, then hyper's upgrade.
    async fn upgrade(
        self: Arc<Self>,
        sandbox: &Arc<Sandbox>,
        policy: &Arc<NetworkPolicy>,
        req: Request<Incoming>,
        mut draft: Draft,
    ) -> Result<Response<Body>, (Refusal, Draft)> {
        let authority = req.uri().authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
        let target = match Target::parse_authority(&authority, None) {
            Ok(t) => t,
            Err(e) => {
                let r =
                    Refusal::Malformed { input: quote(authority.as_bytes()), why: e.to_string() };
                return Err((r, draft));
            }
        };
        draft.target(&target);
        let admitted = match self.admit(sandbox, policy, &target, "CONNECT", None).await {
            Ok(a) => a,
            Err(r) => return Err((r, draft)),
        };
        draft.event.decision = "allow";
        draft.event.rule = admitted.rule.to_string();
        let mut upstream = match self.connect(&target, &admitted.addrs).await {
            Ok(s) => s,
            Err(r) => return Err((r, draft)),
        };
        let (this, sandbox, policy) = (self.clone(), sandbox.clone(), policy.clone());
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                // Stage `intercept`, as for a CONNECT that opens a connection.
                Ok(upgraded) if this.intercepts(&policy, &target) => {
                    let client = TokioIo::new(upgraded);
                    let addrs = admitted.addrs;
                    let (inner, sb, pol) = (this.clone(), sandbox.clone(), policy.clone());
                    crate::intercept::serve(
                        inner, sb, pol, target, client, upstream, addrs, &mut draft,
                    )
                    .await;
                }
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let sni = this
                        .sni_filter(
                            &sandbox,
                            &policy,
                            &target,
                            &mut client,
                            &upstream,
                            BytesMut::new(),
                        )
                        .await;
                    match sni {
                        Ok(first) => {
                            let activity = Activity::new();
                            activity.up.fetch_add(first.len() as u64, Ordering::Relaxed);
                            let idle = this.config.idle_timeout;
                            let buf = this.config.tunnel_buffer;
                            let r = match tokio::io::AsyncWriteExt::write_all(&mut upstream, &first)
                                .await
                            {
                                Ok(()) => {
                                    tunnel::copy(&mut client, &mut upstream, buf, &activity, idle)
                                        .await
                                        .map_err(|e| e.to_string())
                                }
                                Err(e) => Err(e.to_string()),
                            };
                            (draft.event.bytes_up, draft.event.bytes_down) = activity.totals();
                            draft.event.error = r.err();
                        }
                        Err(refusal) => {
                            draft.event.decision = "deny";
                            draft.event.rule = refusal.why.clone();
                            draft.event.error = Some(refusal.why);
                            let _ = tokio::io::AsyncWriteExt::write_all(
                                &mut client,
                                &crate::conn::TLS_ACCESS_DENIED,
                            )
                            .await;
                        }
                    }
                }
                Err(e) => draft.event.error = Some(e.to_string()),
            }
            draft.finish(&this);
        });
        Ok(Response::new(full(Bytes::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_headers() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eDp5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
            ("content-length", "3"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["accept", "content-length"]);
    }
}
