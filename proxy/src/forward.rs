//! Plain HTTP through hyper, for what the relay (`relay.rs`) hands on: hyper's HTTP/1.1 server
//! reads the requests of a connection from there on, each goes through the decision stages and is
//! forwarded over a pooled keep-alive connection to a checked address.
//! CONNECT requests that arrive on such a connection are upgraded and handed, as raw client
//! streams, to the one tunnel path (`pipeline.rs`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use sandgate_config::{NetworkPolicy, Target};
use tokio::time::Instant;

use crate::attribution::Attribution;
use crate::ctx::{Ctx, RequestTarget, host_header};
use crate::denial::{Refusal, render_refusal_with_grants};
use crate::io::{ClientStream, Rewind};
use crate::pool::{Body, UpConn};
use crate::proxy::{ProxyShared, Sandbox};

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
    if headers.contains_key(header::CONNECTION) {
        strip_named(headers);
    }
    for name in HOP_BY_HOP.iter() {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// Removes the headers `Connection` names.
fn strip_named(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in &named {
        headers.remove(name);
    }
}

/// The event of one forwarded (or intercepted) request, recorded when both bodies are done with.
pub(crate) struct Pending {
    pub(crate) inner: Arc<ProxyShared>,
    pub(crate) ctx: Mutex<Option<Ctx>>,
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let ctx = self.ctx.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut ctx) = ctx {
            ctx.event.bytes_up = *self.up.get_mut();
            ctx.event.bytes_down = *self.down.get_mut();
            self.inner.logging(ctx);
        }
    }
}

/// A body that counts its data bytes and keeps the request's event alive until it is dropped.
/// The response body also drives its upstream connection, and gives it back to the pool once
/// the response has been read to its end.
pub(crate) struct Counted<B> {
    inner: B,
    pending: Arc<Pending>,
    down: bool,
    up: Option<UpConn>,
    done: bool,
}

impl<B> Counted<B> {
    pub(crate) fn new(inner: B, pending: Arc<Pending>, down: bool, up: Option<UpConn>) -> Self {
        Counted { inner, pending, down, up, done: false }
    }
}

impl<B> Drop for Counted<B> {
    fn drop(&mut self) {
        // A response not read to its end leaves bytes on the connection: close it instead.
        if let Some(up) = self.up.take()
            && self.done
            && !up.ended
        {
            self.pending.inner.pool.put(up);
        }
    }
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
        if let Some(up) = &mut this.up {
            up.poll_driver(cx);
        }
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let counter = if this.down { &this.pending.down } else { &this.pending.up };
                    counter.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                this.done = this.inner.is_end_stream();
            }
            Poll::Ready(None) => this.done = true,
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
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

pub(crate) fn refusal_response(
    r: &Refusal,
    policy: &NetworkPolicy,
    granted: &[String],
) -> Response<Body> {
    let rendered = render_refusal_with_grants(r, policy, granted);
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

impl ProxyShared {
    /// Serves the plain-HTTP requests of one connection (the first one already read, in front).
    pub(crate) async fn serve_http(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        io: Rewind<ClientStream>,
        process: Attribution,
    ) {
        let this = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            let (this, sandbox, process) = (this.clone(), sandbox.clone(), process.clone());
            async move { Ok::<_, Infallible>(this.request(sandbox, req, process).await) }
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

    /// One request of a keep-alive connection: `request_filter`, then `forward` (absolute form)
    /// or the tunnel stages (CONNECT); `logging` when its response body is done with.
    async fn request(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        req: Request<Incoming>,
        process: Attribution,
    ) -> Response<Body> {
        let mut ctx =
            Ctx::new(sandbox, req.method().as_str(), Instant::now()).with_process(&process);
        let connect = req.method() == Method::CONNECT;
        let filtered = {
            let auth = req.headers().get(header::PROXY_AUTHORIZATION).map(|v| v.as_bytes());
            let target = if connect {
                RequestTarget::Authority(req.uri().authority().map_or("", |a| a.as_str()))
            } else {
                RequestTarget::Absolute(req.uri())
            };
            self.request_filter(&mut ctx, target, auth)
        };
        let result = match filtered {
            Err(r) => Err((r, ctx)),
            Ok(()) if connect => self.clone().upgrade(ctx, req).await,
            Ok(()) => self.clone().forward(ctx, req).await,
        };
        match result {
            Ok(resp) => resp,
            Err((r, mut ctx)) => {
                ctx.refused(&r);
                let resp = refusal_response(&r, &ctx.policy, &self.granted(&ctx.sandbox));
                self.settle(&mut ctx).await;
                self.logging(ctx);
                resp
            }
        }
    }

    /// Stages `decide` → `ask` → `upstream_peer` → `connect` → `forward` for an absolute-form
    /// request whose target `request_filter` has parsed.
    async fn forward(
        self: Arc<Self>,
        mut ctx: Ctx,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, (Refusal, Ctx)> {
        // `http://host?q` has the query without a path; the origin is sent `/?q` (origin form),
        // so the decision, the HTTP rules and the log read that too.
        let raw = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let slashed;
        let path = if raw.starts_with('/') {
            raw
        } else {
            slashed = format!("/{raw}");
            slashed.as_str()
        };
        // For the traffic log; bounded (the head limit bounds it too, but the log should not
        // carry a 64 KiB query string per line).
        ctx.event.path = Some(path.chars().take(1000).collect());
        if let Err(r) = self.admit(&mut ctx, Some(path)).await {
            return Err((r, ctx));
        }
        // Stage `intercept` for plain HTTP: the host's `[[http_rules]]` apply here too (secrets
        // are never sent without TLS; a placeholder is noted below).
        if ctx.policy.intercept().in_use() {
            let target = match ctx.target() {
                Ok(t) => t.clone(),
                Err(r) => return Err((r, ctx)),
            };
            let (sandbox, policy) = (ctx.sandbox.clone(), ctx.policy.clone());
            let (method, uri, headers) = (req.method().as_str(), req.uri(), req.headers());
            if let Err(r) = self
                .http_rules(
                    &sandbox,
                    &policy,
                    &target,
                    method,
                    uri,
                    headers,
                    &mut ctx.event,
                    &ctx.process,
                )
                .await
            {
                return Err((r, ctx));
            }
        }
        let host = match ctx.target() {
            // The String's buffer becomes the header's (no copy).
            Ok(target) => HeaderValue::from_maybe_shared(Bytes::from(host_header(target))),
            Err(r) => return Err((r, ctx)),
        };
        let host = match host {
            Ok(h) => h,
            // A normalised host is made of header-safe bytes; refuse rather than trust that.
            Err(e) => {
                let r = Refusal::Malformed { input: ctx.event.host.clone(), why: e.to_string() };
                return Err((r, ctx));
            }
        };
        let (mut parts, body) = req.into_parts();
        if !ctx.policy.intercept().secrets.is_empty() {
            let seen = crate::secret::placeholders_seen(&parts);
            if !seen.is_empty() {
                ctx.event.rule.push_str(&crate::secret::placeholder_note(&seen));
            }
        }
        // Origin form upstream: the path and query as they came (no reparse).
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = None;
        uri.authority = None;
        if uri.path_and_query.is_none() {
            uri.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
        }
        parts.uri = match Uri::from_parts(uri) {
            Ok(u) => u,
            Err(e) => {
                let r = Refusal::Malformed { input: ctx.event.host.clone(), why: e.to_string() };
                return Err((r, ctx));
            }
        };
        strip_hop_by_hop(&mut parts.headers);
        // The Host header names the decided target, whatever the client wrote in it.
        parts.headers.insert(header::HOST, host);
        parts.version = Version::HTTP_11;
        let pending = Arc::new(Pending {
            inner: self.clone(),
            ctx: Mutex::new(None),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        });
        let body = Counted::new(body, pending.clone(), false, None).boxed();
        let sent = match ctx.target() {
            Ok(target) => self.send(target, &ctx.addrs, Request::from_parts(parts, body)).await,
            Err(r) => Err(r),
        };
        let (resp, up) = match sent {
            Ok(r) => r,
            Err(r) => return Err((r, ctx)),
        };
        *pending.ctx.lock().unwrap_or_else(|e| e.into_inner()) = Some(ctx);
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let mut body = Counted::new(body, pending, true, Some(up));
        // A response without a body may never be polled: it is complete already.
        body.done = hyper::body::Body::is_end_stream(&body.inner);
        Ok(Response::from_parts(parts, body.boxed()))
    }

    /// Sends over a pooled connection, or a new one to the first checked address that answers;
    /// returns the response head and the connection, which its body goes on driving.
    async fn send(
        &self,
        target: &Target,
        addrs: &[SocketAddr],
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, UpConn), Refusal> {
        let unreachable = |e: &dyn std::fmt::Display| Refusal::Unreachable {
            target: target.to_string(),
            error: e.to_string(),
        };
        if let Some(mut conn) = self.pool.take(addrs) {
            // hyper's future owns what it needs (a channel): the handle is not borrowed by it.
            let mut fut = std::pin::pin!(conn.tx.try_send_request(req));
            let (sent, conn) = match conn.drive(fut.as_mut()).await {
                Some(sent) => (sent, Some(conn)),
                // The connection ended with the request still queued: dropping it cancels the
                // queue, which hands the request back.
                None => {
                    drop(conn);
                    (fut.await, None)
                }
            };
            match (sent, conn) {
                (Ok(resp), Some(conn)) => return Ok((resp, conn)),
                (Ok(_), None) => {
                    return Err(unreachable(&"the upstream closed the connection"));
                }
                // The pooled connection was closed under us before the request went out: retry
                // once on a fresh connection.
                (Err(mut e), _) => match e.take_message() {
                    Some(r) => req = r,
                    None => return Err(unreachable(&e.into_error())),
                },
            }
        }
        let stream = self.connect(target, addrs).await?;
        // A tunnel through the upstream proxy is keyed by nothing of its destination (its peer
        // is the upstream): never pooled, so it cannot be handed to a request for another host.
        let addr = match self.via_upstream(target) {
            true => None,
            false => Some(stream.peer_addr().map_err(|e| unreachable(&e))?),
        };
        let (tx, driver) =
            http1::handshake(TokioIo::new(stream)).await.map_err(|e| unreachable(&e))?;
        let mut conn = UpConn { tx, driver, ended: false, addr };
        let fut = conn.tx.send_request(req);
        let sent = conn.drive(fut).await;
        match sent {
            Some(Ok(resp)) => Ok((resp, conn)),
            Some(Err(e)) => Err(unreachable(&e)),
            None => Err(unreachable(&"the upstream closed the connection")),
        }
    }

    /// A CONNECT on a plain-HTTP keep-alive connection: the stages up to `connect`, hyper's
    /// upgrade, then the raw client stream back out of hyper into the same tunnel stages as a
    /// CONNECT on a fresh connection (splice included).
    async fn upgrade(
        self: Arc<Self>,
        mut ctx: Ctx,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, (Refusal, Ctx)> {
        let upstream = match self.open_tunnel(&mut ctx).await {
            Ok(s) => s,
            Err(r) => return Err((r, ctx)),
        };
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => match upgraded.downcast::<TokioIo<Rewind<ClientStream>>>() {
                    Ok(parts) => {
                        let (unread, client) = parts.io.into_inner().into_parts();
                        // What hyper read past the CONNECT head comes first, then what it had
                        // not read yet of the bytes replayed in front of the socket.
                        let mut pending = BytesMut::from(&parts.read_buf[..]);
                        pending.extend_from_slice(&unread);
                        self.tunnel_stages(&mut ctx, client, upstream, pending).await;
                    }
                    Err(_) => {
                        ctx.event.error = Some("the upgraded connection is not a client's".into());
                    }
                },
                Err(e) => ctx.event.error = Some(e.to_string()),
            }
            self.logging(ctx);
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
