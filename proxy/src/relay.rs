//! The plain-HTTP fast path: a lean HTTP/1.1 relay for the requests nearly every client sends
//! (an absolute-form `http://` URL, HTTP/1.1, no body or a `Content-Length` one), with raw pooled
//! keep-alive connections upstream. Every other request — and every request of a sandbox whose
//! policy has `[[secrets]]` or `[[http_rules]]`, or whose target leaves through the upstream
//! proxy — is handed, with the rest of the connection, to hyper's server in `forward.rs`, which
//! applies today's rules to it (and answers any malformed request exactly as before).
//!
//! # Why not a crate
//!
//! hyper on both sides was the floor of the old path: on the 2-core benchmark machine a forwarded
//! request cost about 27 µs of the proxy's CPU against nginx's 21 µs, a third of it in user space
//! (hyper's `HeaderMap`s and `Uri`s built and encoded twice, its client's request channel and
//! callback, the body boxes, the allocator). No maintained crate relays HTTP/1.1 heads without
//! building such a model of them: hyper, `httpcodec`, `async-h1` and `actix-http` all decode a
//! message into typed headers and re-encode it. Here the head is parsed by `httparse` (the parser
//! hyper uses, with the same configuration) and relayed as the bytes the client wrote, minus the
//! hop-by-hop headers.
//!
//! # Request smuggling
//!
//! The relay takes a request only when its framing is unambiguous and hands everything else to
//! hyper (whose rules are the contract, see `tests/redteam_forward.rs`): any `Transfer-Encoding`
//! (so no CL+TE, no obfuscated or non-final `chunked`), more than one `Content-Length` or one that
//! is not plain digits, a bare LF anywhere in the head, obs-fold and invalid header bytes (which
//! `httparse` refuses), `Upgrade`, `Expect`, `Connection: upgrade`, HTTP/1.0, CONNECT, anything
//! but an `http://` absolute-form target, heads larger than the limit. The upstream sees the body
//! framed by the one `Content-Length` the relay wrote itself. A response is framed by hyper's
//! client rules (HEAD, 1xx, 204, 304 without a body; `Transfer-Encoding` whose last coding is
//! `chunked` before `Content-Length`; other codings read to close; differing lengths → 502) and
//! re-framed for the client: its own `Content-Length`, or chunked from the decoded bytes (a
//! chunked body is parsed strictly — hex size, CRLF only — and trailers are dropped), so what the
//! client reads is well-formed whatever the origin sent.
//!
//! A request goes upstream a second time (on a new connection, when a pooled one turns out to be
//! closed) only when it has no body and either its head could not be written or its method is
//! safe (RFC 9110 9.2.2): a request the origin read and then closed on may have been acted on.
//! The red-team attempts against this module are `tests/suite/redteam_relay.rs`.

use std::io::Write as _;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use hyper::Uri;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::attribution::Attribution;
use crate::ctx::{Ctx, RequestTarget, host_header};
use crate::denial::{Refusal, render_refusal_with_grants};
use crate::io::{ClientStream, Rewind};
use crate::proxy::{ProxyShared, Sandbox};

/// Most headers in one head (hyper's default, so a head the relay refuses hyper refuses too).
const MAX_HEADERS: usize = 100;
/// Largest upstream response head (hyper's client buffer limit).
const MAX_RESPONSE_HEAD: usize = 8192 + 4096 * 100;
/// Largest chunk-size line or trailer section of a chunked response.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;
/// Read size for bodies.
const BODY_READ: usize = 64 * 1024;

/// What [`classify`] made of the bytes at the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// The head is not complete yet.
    Partial,
    /// Not for the relay: hyper serves this request and the rest of the connection.
    Handoff,
    /// A request the relay forwards.
    Simple(Simple),
}

/// A request head the relay forwards: positions in the head's bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Simple {
    /// Length of the head.
    pub(crate) len: usize,
    method: Range<usize>,
    target: Range<usize>,
    /// The body's length (`Content-Length`), 0 without one.
    pub(crate) body: u64,
    /// Whether the client sent `Content-Length` (forwarded even when 0).
    has_length: bool,
    /// `Connection: close`.
    close: bool,
    proxy_authorization: Option<Range<usize>>,
    /// Every header to forward (name, value), in order.
    headers: Vec<(Range<usize>, Range<usize>)>,
}

fn range(base: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - base.as_ptr() as usize;
    start..start + part.len()
}

/// Headers that belong to one hop (or that the relay writes itself) and are never forwarded.
fn hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 11] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The comma-separated tokens of a `Connection` value.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii()).filter(|t| !t.is_empty())
}

/// Whether `name` is named by one of the `Connection` values.
fn named(connection: &[&[u8]], name: &[u8]) -> bool {
    connection.iter().any(|v| tokens(v).any(|t| t.eq_ignore_ascii_case(name)))
}

/// A `Content-Length` value: digits only (no sign, no spaces, no list), at most 19 of them.
fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Whether every LF in `head` ends a CRLF.
fn crlf_only(head: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in head {
        if b == b'\n' && prev != b'\r' {
            return false;
        }
        prev = b;
    }
    true
}

/// Decides whether the request at the start of `buf` is one the relay forwards (see the module
/// doc for the rules); `limit` bounds the head.
pub(crate) fn classify(buf: &[u8], limit: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= limit => len,
        Ok(httparse::Status::Partial) if buf.len() < limit => return Parsed::Partial,
        _ => return Parsed::Handoff,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Handoff;
    };
    if method.eq_ignore_ascii_case("CONNECT")
        || target.len() < 7
        || !target.as_bytes()[..7].eq_ignore_ascii_case(b"http://")
        || !crlf_only(&buf[..len])
    {
        return Parsed::Handoff;
    }
    let mut simple = Simple {
        len,
        method: range(buf, method.as_bytes()),
        target: range(buf, target.as_bytes()),
        body: 0,
        has_length: false,
        close: false,
        proxy_authorization: None,
        headers: Vec::with_capacity(req.headers.len()),
    };
    let mut connection: Vec<&[u8]> = Vec::new();
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("transfer-encoding") || is("upgrade") || is("expect") {
            return Parsed::Handoff;
        }
        if is("content-length") {
            match content_length(h.value) {
                Some(n) if !simple.has_length => (simple.body, simple.has_length) = (n, true),
                _ => return Parsed::Handoff,
            }
        } else if is("connection") {
            for t in tokens(h.value) {
                if t.eq_ignore_ascii_case(b"upgrade") {
                    return Parsed::Handoff;
                }
                if t.eq_ignore_ascii_case(b"close") {
                    simple.close = true;
                }
            }
            connection.push(h.value);
        } else if is("proxy-authorization") {
            simple.proxy_authorization.get_or_insert(range(buf, h.value));
        }
        if !hop_by_hop(name) {
            simple.headers.push((range(buf, name), range(buf, h.value)));
        }
    }
    if !connection.is_empty() {
        simple.headers.retain(|(n, _)| !named(&connection, &buf[n.clone()]));
    }
    Parsed::Simple(simple)
}

/// How a response body is framed on the upstream connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes.
    Close,
}

/// A parsed upstream response head.
struct Response {
    len: usize,
    status: u16,
    reason: Range<usize>,
    framing: Framing,
    /// Whether the upstream connection may carry another request.
    reusable: bool,
    headers: Vec<(Range<usize>, Range<usize>)>,
}

/// Why a response could not be relayed.
#[derive(Debug)]
enum UpError {
    /// Writing the request head failed: the upstream had closed, so nothing of it was read.
    Unsent(String),
    /// The upstream closed (or failed) before the first byte of a response.
    Nothing(String),
    /// Anything else.
    Other(String),
}

impl UpError {
    fn text(&self) -> &str {
        match self {
            UpError::Unsent(s) | UpError::Nothing(s) | UpError::Other(s) => s,
        }
    }
}

/// Parses the response head at the start of `buf`: `Ok(None)` while incomplete. 1xx heads must
/// have been skipped by the caller (see `status`).
fn parse_response(buf: &[u8], head_method: bool) -> Result<Option<Response>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_RESPONSE_HEAD => return Ok(None),
        Ok(httparse::Status::Partial) => return Err("response head too large".into()),
        Err(e) => return Err(format!("invalid response head: {e}")),
    };
    let (Some(version), Some(status)) = (res.version, res.code) else {
        return Err("invalid response head".into());
    };
    let reason = range(buf, res.reason.unwrap_or("").as_bytes());
    let mut out = Vec::with_capacity(res.headers.len());
    let mut connection: Vec<&[u8]> = Vec::new();
    let mut te_last: Option<&[u8]> = None;
    let mut length: Option<u64> = None;
    let mut bad_length = false;
    let mut close = version == 0;
    for h in res.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te_last = Some(h.value);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // A list of equal values is one length (hyper's rule); differing ones are an error.
            for v in h.value.split(|&b| b == b',') {
                match content_length(v.trim_ascii()) {
                    Some(n) if length.is_none_or(|l| l == n) => length = Some(n),
                    _ => bad_length = true,
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in tokens(h.value) {
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                }
            }
            connection.push(h.value);
        }
        out.push((range(buf, name), range(buf, h.value)));
    }
    let no_body = head_method || matches!(status, 204 | 304) || (100..200).contains(&status);
    let framing = if no_body {
        Framing::None
    } else if let Some(te) = te_last {
        if version == 0 {
            return Err("HTTP/1.0 response with Transfer-Encoding".into());
        }
        match te.rsplit(|&b| b == b',').next().map(|t| t.trim_ascii()) {
            Some(t) if t.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
            _ => Framing::Close,
        }
    } else if bad_length {
        return Err("invalid Content-Length in the response".into());
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Close
    };
    // A header the relay writes itself, or one for this hop only, is not passed on; a response
    // without a body keeps its Content-Length (it describes the resource, as for HEAD).
    let dropped = |name: &[u8]| {
        if named(&connection, name) {
            true
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // An invalid one is not passed on, even where it frames nothing.
            framing != Framing::None || bad_length
        } else {
            !name.eq_ignore_ascii_case(b"host") && hop_by_hop(name)
        }
    };
    out.retain(|(n, _)| !dropped(&buf[n.clone()]));
    let reusable = !close && framing != Framing::Close;
    Ok(Some(Response { len, status, reason, framing, reusable, headers: out }))
}

/// One step of the strict chunked decoder.
#[derive(Debug, PartialEq, Eq)]
enum Chunk {
    /// More bytes are needed.
    NeedMore,
    /// `n` bytes of chunk data follow, after `skip` framing bytes.
    Data { skip: usize, n: u64 },
    /// The last chunk and its trailers end after `skip` bytes.
    End { skip: usize },
}

/// Reads a chunk-size line (`HEX[;ext]CRLF`) at the start of `buf`.
fn chunk_size(buf: &[u8]) -> Result<Chunk, String> {
    let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
        return match buf.len() > MAX_CHUNK_LINE {
            true => Err("chunk size line too long".into()),
            false => Ok(Chunk::NeedMore),
        };
    };
    if lf == 0 || buf[lf - 1] != b'\r' {
        return Err("chunk size line without CRLF".into());
    }
    let line = &buf[..lf - 1];
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return Err("invalid chunk size".into());
    }
    let rest = &line[digits..];
    // Extensions are ignored, but must be made of visible characters (no CR, NUL, ...).
    if !(rest.is_empty() || rest[0] == b';' || rest[0] == b' ' || rest[0] == b'\t')
        || rest.iter().any(|&b| b != b'\t' && (b < 0x20 || b == 0x7f))
    {
        return Err("invalid chunk extension".into());
    }
    let n = u64::from_str_radix(std::str::from_utf8(&line[..digits]).unwrap_or("x"), 16)
        .map_err(|_| "invalid chunk size".to_string())?;
    if n > 0 {
        return Ok(Chunk::Data { skip: lf + 1, n });
    }
    // The last chunk: trailer lines until an empty one (all dropped).
    let mut at = lf + 1;
    loop {
        let Some(end) = buf[at..].iter().position(|&b| b == b'\n') else {
            return match buf.len() - lf > MAX_TRAILERS {
                true => Err("trailers too large".into()),
                false => Ok(Chunk::NeedMore),
            };
        };
        let line_end = at + end;
        if end == 0 || buf[line_end - 1] != b'\r' {
            return Err("trailer line without CRLF".into());
        }
        if end == 1 {
            return Ok(Chunk::End { skip: line_end + 1 });
        }
        at = line_end + 1;
    }
}

/// Where a request's body stands after the relay is done with it.
struct Exchange {
    /// Request body bytes sent upstream.
    up: u64,
    /// Response body bytes sent to the client.
    down: u64,
    /// Whether the client connection may carry another request.
    client_alive: bool,
}

impl ProxyShared {
    /// Serves the plain-HTTP requests of one connection, the first one's bytes already in `buf`
    /// (see the module doc for which requests the relay takes and which go to hyper).
    pub(crate) async fn relay_http(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        mut client: ClientStream,
        mut buf: BytesMut,
        process: Attribution,
    ) {
        let limit = self.config.max_head_bytes.max(8192);
        let mut upbuf = BytesMut::with_capacity(8192);
        let mut out: Vec<u8> = Vec::with_capacity(1024);
        loop {
            // A complete head, within the header timeout (counted from when the wait began).
            let deadline = Instant::now() + self.config.header_timeout;
            let simple = loop {
                if !buf.is_empty() {
                    match classify(&buf, limit) {
                        Parsed::Simple(s) => break s,
                        Parsed::Handoff => {
                            return self.handoff(sandbox, client, buf, None, process).await;
                        }
                        Parsed::Partial => {}
                    }
                }
                buf.reserve(4096);
                match tokio::time::timeout_at(deadline, client.read_buf(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    // A head begun and not finished in time (slowloris): the connection ends
                    // with an event, as for the first head (`conn.rs`). An idle keep-alive
                    // connection that sent nothing just ends.
                    Err(_) if !buf.is_empty() => {
                        let began = deadline - self.config.header_timeout;
                        let mut ctx = Ctx::new(sandbox, "", began).with_process(&process);
                        ctx.event.rule = "request head timeout".into();
                        ctx.event.error = Some(format!(
                            "no complete request head within {}s",
                            self.config.header_timeout.as_secs()
                        ));
                        return self.logging(ctx);
                    }
                    // Closed, failed, or idle: the connection ends.
                    _ => return,
                }
            };
            let start = Instant::now();
            let head = buf.split_to(simple.len).freeze();
            let Ok(uri) = Uri::from_maybe_shared(head.slice(simple.target.clone())) else {
                return self.handoff(sandbox, client, buf, Some(head), process).await;
            };
            let method = std::str::from_utf8(&head[simple.method.clone()]).unwrap_or("");
            let mut ctx = Ctx::new(sandbox.clone(), method, start).with_process(&process);
            let auth = simple.proxy_authorization.clone().map(|r| &head[r]);
            let filtered = self.request_filter(&mut ctx, RequestTarget::Absolute(&uri), auth);
            let policy = ctx.policy.intercept();
            let hyper_path = match (&filtered, &ctx.target) {
                (Ok(()), Some(t)) => policy.in_use() || self.via_upstream(t),
                _ => true,
            };
            if hyper_path {
                // hyper's path runs the whole pipeline for it again (this context is dropped
                // unrecorded): refusals, HTTP rules, placeholders, the upstream proxy.
                return self.handoff(sandbox, client, buf, Some(head), process).await;
            }
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            // `http://host?q` goes upstream as `/?q` (the path-and-query's Display): the event
            // and the decision name what the origin is sent (an allocation in that case only).
            let slashed;
            let path = match path.starts_with('?') {
                true => {
                    slashed = format!("/{path}");
                    slashed.as_str()
                }
                false => path,
            };
            ctx.event.path = Some(path.chars().take(1000).collect());
            if let Err(r) = self.admit(&mut ctx, Some(path)).await {
                let alive = self.refuse(&mut client, ctx, &r, &simple).await;
                if !alive {
                    return;
                }
                continue;
            }
            out.clear();
            let _ = write!(out, "{method} ");
            match uri.path_and_query() {
                Some(pq) => {
                    let _ = write!(out, "{pq}");
                }
                None => out.push(b'/'),
            }
            out.extend_from_slice(b" HTTP/1.1\r\n");
            for (n, v) in &simple.headers {
                out.extend_from_slice(&head[n.clone()]);
                out.extend_from_slice(b": ");
                out.extend_from_slice(&head[v.clone()]);
                out.extend_from_slice(b"\r\n");
            }
            let target = ctx.target.clone().expect("request_filter set the target");
            let _ = write!(out, "host: {}\r\n", host_header(&target));
            if simple.has_length {
                let _ = write!(out, "content-length: {}\r\n", simple.body);
            }
            out.extend_from_slice(b"\r\n");
            let mut moved = (0u64, 0u64);
            let result = self
                .exchange(
                    &ctx,
                    &mut client,
                    &mut buf,
                    &mut upbuf,
                    &mut out,
                    &simple,
                    method,
                    &mut moved,
                )
                .await;
            let alive = match result {
                Ok(x) => {
                    ctx.event.bytes_up = x.up;
                    ctx.event.bytes_down = x.down;
                    self.logging(ctx);
                    x.client_alive
                }
                Err((r, sent)) => {
                    // What moved before the failure (its event counts it, as hyper's path does).
                    (ctx.event.bytes_up, ctx.event.bytes_down) = moved;
                    match sent {
                        // Nothing reached the client yet: it gets a 502.
                        false => self.refuse(&mut client, ctx, &r, &simple).await,
                        true => {
                            ctx.event.error = Some(r.rule_text());
                            self.logging(ctx);
                            return;
                        }
                    }
                }
            };
            if !alive {
                let _ = client.shutdown().await;
                return;
            }
        }
    }

    /// hyper's server takes over the connection at the request `head` (when given) followed by
    /// the unread `rest`.
    async fn handoff(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        client: ClientStream,
        rest: BytesMut,
        head: Option<Bytes>,
        process: Attribution,
    ) {
        let prefix = match head {
            Some(head) => {
                let mut all = BytesMut::with_capacity(head.len() + rest.len());
                all.extend_from_slice(&head);
                all.extend_from_slice(&rest);
                all.freeze()
            }
            None => rest.freeze(),
        };
        self.serve_http(sandbox, Rewind::new(prefix, client), process).await;
    }

    /// Records the event of a refusal and answers it as hyper's path does
    /// (`forward::refusal_response`); returns whether the client connection may go on.
    async fn refuse(
        &self,
        client: &mut ClientStream,
        mut ctx: Ctx,
        r: &Refusal,
        simple: &Simple,
    ) -> bool {
        ctx.refused(r);
        let rendered = render_refusal_with_grants(r, &ctx.policy, &self.granted(&ctx.sandbox));
        // An unread body, a 400 or a client that asked to close: the connection ends here.
        let alive = rendered.status != 400 && !simple.close && simple.body == 0;
        let mut out = Vec::with_capacity(rendered.body.len() + 512);
        let reason: String =
            rendered.reason.chars().filter(|&c| c == '\t' || (c >= ' ' && c != '\x7f')).collect();
        let _ = write!(out, "HTTP/1.1 {} {reason}\r\n", rendered.status);
        for (k, v) in &rendered.headers {
            if hyper::header::HeaderValue::from_str(v).is_ok() {
                let _ = write!(out, "{}: {v}\r\n", k.to_ascii_lowercase());
            }
        }
        let _ = write!(
            out,
            "content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n",
            rendered.body.len()
        );
        if !alive {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(rendered.body.as_bytes());
        // Recorded before the client can read it (see `record_refusal`).
        self.settle(&mut ctx).await;
        self.logging(ctx);
        let written = client.write_all(&out).await.is_ok();
        if !alive {
            let _ = client.shutdown().await;
        }
        alive && written
    }

    /// Sends the request (`out` holds its head) over a pooled or new connection, streams its body
    /// from the client, and relays the response. Errors say whether any byte reached the client.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        ctx: &Ctx,
        client: &mut ClientStream,
        buf: &mut BytesMut,
        upbuf: &mut BytesMut,
        out: &mut Vec<u8>,
        simple: &Simple,
        method: &str,
        moved: &mut (u64, u64),
    ) -> Result<Exchange, (Refusal, bool)> {
        let target = ctx.target().map_err(|r| (r, false))?;
        let unreachable = |e: &str| {
            let r = Refusal::Unreachable { target: target.to_string(), error: e.to_string() };
            (r, false)
        };
        // The body bytes the client sent with the head go out with it.
        let first = (simple.body.min(buf.len() as u64)) as usize;
        out.extend_from_slice(&buf[..first]);
        buf.advance(first);
        let mut left = simple.body - first as u64;
        // The address a connection is pooled under: known for a pooled one, asked of the socket
        // once for a new one (not per request: a system call).
        let fresh = || async {
            let s = self.connect(target, &ctx.addrs).await.map_err(|r| (r, false))?;
            let addr = s.peer_addr().ok();
            Ok::<_, (Refusal, bool)>((s, addr))
        };
        let (mut up, mut addr, mut reused) = match self.pool.raw.take(&ctx.addrs) {
            Some((s, addr)) => (s, Some(addr), true),
            None => {
                let (s, addr) = fresh().await?;
                (s, addr, false)
            }
        };
        let head_method = method == "HEAD";
        let safe = matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE");
        upbuf.clear();
        let response = loop {
            let sent = async {
                up.write_all(out).await.map_err(|e| UpError::Unsent(e.to_string()))?;
                while left > 0 {
                    buf.reserve(BODY_READ);
                    let n =
                        client.read_buf(buf).await.map_err(|e| UpError::Other(e.to_string()))?;
                    if n == 0 {
                        return Err(UpError::Other("the client closed during the body".into()));
                    }
                    let take = (left.min(buf.len() as u64)) as usize;
                    up.write_all(&buf[..take]).await.map_err(|e| UpError::Other(e.to_string()))?;
                    buf.advance(take);
                    left -= take as u64;
                }
                read_response(&mut up, upbuf, head_method).await
            }
            .await;
            match sent {
                Ok(r) => break r,
                // A pooled connection the upstream closed meanwhile: once more on a new one, for
                // a request without a body. Only when the head could not be written (nothing
                // reached the origin) or the method is safe: a request the origin read and then
                // closed on may have been acted on, and is not sent twice (RFC 9110 9.2.2).
                Err(e @ (UpError::Unsent(_) | UpError::Nothing(_)))
                    if reused && simple.body == 0 && (safe || matches!(e, UpError::Unsent(_))) =>
                {
                    reused = false;
                    (up, addr) = fresh().await?;
                    upbuf.clear();
                }
                Err(e) => {
                    moved.0 = match e {
                        UpError::Unsent(_) => 0,
                        _ => simple.body - left,
                    };
                    return Err(unreachable(e.text()));
                }
            }
        };
        let body_up = simple.body;
        // The response head for the client.
        out.clear();
        let _ = write!(out, "HTTP/1.1 {} ", response.status);
        out.extend_from_slice(&upbuf[response.reason.clone()]);
        out.extend_from_slice(b"\r\n");
        for (n, v) in &response.headers {
            out.extend_from_slice(&upbuf[n.clone()]);
            out.extend_from_slice(b": ");
            out.extend_from_slice(&upbuf[v.clone()]);
            out.extend_from_slice(b"\r\n");
        }
        match response.framing {
            Framing::Length(n) => {
                let _ = write!(out, "content-length: {n}\r\n");
            }
            Framing::Chunked | Framing::Close => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            }
            Framing::None => {}
        }
        if simple.close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        upbuf.advance(response.len);
        moved.0 = simple.body;
        let down = relay_body(&mut up, client, upbuf, out, response.framing, &mut moved.1).await;
        let (down, clean) = match down {
            Ok(r) => r,
            Err((e, sent)) => {
                // Once the client has the head, its connection cannot be reused.
                if sent {
                    let _ = client.shutdown().await;
                }
                let r = Refusal::Unreachable { target: target.to_string(), error: e };
                return Err((r, sent));
            }
        };
        if response.reusable
            && clean
            && let Some(addr) = addr
        {
            self.pool.raw.put(addr, up);
        }
        Ok(Exchange { up: body_up, down, client_alive: !simple.close })
    }
}

/// Reads the upstream's response head into `upbuf` (1xx heads skipped).
async fn read_response(
    up: &mut TcpStream,
    upbuf: &mut BytesMut,
    head_method: bool,
) -> Result<Response, UpError> {
    let mut any = false;
    loop {
        if !upbuf.is_empty() {
            match parse_response(upbuf, head_method).map_err(UpError::Other)? {
                Some(r) if (100..200).contains(&r.status) => {
                    if r.status == 101 {
                        return Err(UpError::Other("unexpected 101 Switching Protocols".into()));
                    }
                    // An informational response (hyper's client skips them too).
                    upbuf.advance(r.len);
                    continue;
                }
                Some(r) => return Ok(r),
                None => {}
            }
        }
        upbuf.reserve(8192);
        match up.read_buf(upbuf).await {
            Ok(0) if !any => {
                return Err(UpError::Nothing("the upstream closed the connection".into()));
            }
            Ok(0) => {
                return Err(UpError::Other("the upstream closed during the response head".into()));
            }
            Ok(_) => any = true,
            Err(e) if !any => return Err(UpError::Nothing(e.to_string())),
            Err(e) => return Err(UpError::Other(e.to_string())),
        }
    }
}

/// Moves the response body from the upstream to the client, `out` (the response head) first;
/// returns the body bytes and whether the upstream connection ended clean (nothing read past the
/// body). On an error, whether the client got anything.
async fn relay_body<C: AsyncRead + AsyncWrite + Unpin>(
    up: &mut TcpStream,
    client: &mut C,
    upbuf: &mut BytesMut,
    out: &mut Vec<u8>,
    framing: Framing,
    total: &mut u64,
) -> Result<(u64, bool), (String, bool)> {
    let io = |e: std::io::Error| (e.to_string(), true);
    match framing {
        Framing::None => {
            client.write_all(out).await.map_err(io)?;
            Ok((0, upbuf.is_empty()))
        }
        Framing::Length(n) => {
            let first = (n.min(upbuf.len() as u64)) as usize;
            out.extend_from_slice(&upbuf[..first]);
            upbuf.advance(first);
            client.write_all(out).await.map_err(io)?;
            *total = first as u64;
            let mut left = n - first as u64;
            while left > 0 {
                upbuf.clear();
                upbuf.reserve(BODY_READ);
                let got = up.read_buf(upbuf).await.map_err(io)?;
                if got == 0 {
                    return Err(("the upstream closed during the body".into(), true));
                }
                let take = (left.min(upbuf.len() as u64)) as usize;
                client.write_all(&upbuf[..take]).await.map_err(io)?;
                upbuf.advance(take);
                left -= take as u64;
                *total += take as u64;
            }
            Ok((n, upbuf.is_empty()))
        }
        Framing::Chunked => {
            // Until the first write, a broken body still lets the client have a 502 instead.
            let mut sent = false;
            let mut data_left = 0u64;
            // After a chunk's data, its CRLF.
            let mut crlf_due = false;
            loop {
                // Decode what is buffered into `out`, re-chunked.
                loop {
                    if data_left > 0 {
                        let take = (data_left.min(upbuf.len() as u64)) as usize;
                        if take == 0 {
                            break;
                        }
                        let _ = write!(out, "{take:x}\r\n");
                        out.extend_from_slice(&upbuf[..take]);
                        out.extend_from_slice(b"\r\n");
                        upbuf.advance(take);
                        data_left -= take as u64;
                        *total += take as u64;
                        crlf_due = data_left == 0;
                        continue;
                    }
                    if crlf_due {
                        if upbuf.len() < 2 {
                            break;
                        }
                        if &upbuf[..2] != b"\r\n" {
                            return Err(("chunk data not followed by CRLF".into(), sent));
                        }
                        upbuf.advance(2);
                        crlf_due = false;
                    }
                    match chunk_size(upbuf).map_err(|e| (e, sent))? {
                        Chunk::NeedMore => break,
                        Chunk::Data { skip, n } => {
                            upbuf.advance(skip);
                            data_left = n;
                        }
                        Chunk::End { skip } => {
                            upbuf.advance(skip);
                            out.extend_from_slice(b"0\r\n\r\n");
                            client.write_all(out).await.map_err(io)?;
                            return Ok((*total, upbuf.is_empty()));
                        }
                    }
                }
                if !out.is_empty() {
                    client.write_all(out).await.map_err(io)?;
                    out.clear();
                    sent = true;
                }
                upbuf.reserve(BODY_READ);
                let got = up.read_buf(upbuf).await.map_err(|e| (e.to_string(), sent))?;
                if got == 0 {
                    return Err(("the upstream closed during a chunked body".into(), sent));
                }
            }
        }
        Framing::Close => loop {
            if !upbuf.is_empty() {
                let _ = write!(out, "{:x}\r\n", upbuf.len());
                out.extend_from_slice(upbuf);
                out.extend_from_slice(b"\r\n");
                *total += upbuf.len() as u64;
                upbuf.clear();
            }
            if !out.is_empty() {
                client.write_all(out).await.map_err(io)?;
                out.clear();
            }
            upbuf.reserve(BODY_READ);
            if up.read_buf(upbuf).await.map_err(io)? == 0 {
                client.write_all(b"0\r\n\r\n").await.map_err(io)?;
                return Ok((*total, false));
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(head: &str) -> Simple {
        match classify(head.as_bytes(), 65536) {
            Parsed::Simple(s) => s,
            other => panic!("{head:?}: {other:?}"),
        }
    }

    fn handed_off(head: &str) -> bool {
        classify(head.as_bytes(), 65536) == Parsed::Handoff
    }

    #[test]
    fn plain_requests_are_relayed_with_their_hop_by_hop_headers_removed() {
        let h = "GET http://a.test/x?y HTTP/1.1\r\nHost: evil.test\r\nAccept: */*\r\n\
                 Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n\
                 Proxy-Authorization: Basic eDp5\r\nProxy-Connection: x\r\nTE: trailers\r\n\
                 Trailer: x\r\nContent-Length: 3\r\n\r\nabc";
        let s = simple(h);
        assert_eq!(s.len, h.len() - 3);
        assert_eq!(s.body, 3);
        assert!(!s.close);
        let b = h.as_bytes();
        let names: Vec<&[u8]> = s.headers.iter().map(|(n, _)| &b[n.clone()]).collect();
        assert_eq!(names, [&b"Accept"[..]]);
        assert_eq!(&b[s.proxy_authorization.unwrap()], b"Basic eDp5");
        assert_eq!(&b[s.target.clone()], b"http://a.test/x?y");
        assert!(simple("GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\n").close);
        assert!(matches!(
            classify(b"GET http://a.test/ HTTP/1.1\r\nAccept: x", 65536),
            Parsed::Partial
        ));
    }

    /// Every request whose framing could be read two ways, or that needs more than the relay
    /// does, goes to hyper (whose answers `tests/redteam_forward.rs` pins down).
    #[test]
    fn ambiguous_or_unusual_requests_are_handed_to_hyper() {
        for h in [
            // CL + TE, TE alone (chunked, obfuscated, not final), duplicate CL (equal or not).
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: +4\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 0x4\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: \r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            // Obs-fold, bare LF, invalid header bytes.
            "GET http://a.test/ HTTP/1.1\r\nX: y\r\n forbidden.test\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\nHost: a.test\n\n",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX: a\0b\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX y: 1\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX : 1\r\n\r\n",
            // Upgrades, expectations, HTTP/1.0, CONNECT, other targets.
            "GET http://a.test/ HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nConnection: upgrade\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            "GET http://a.test/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "CONNECT a.test:443 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            "GET https://a.test/ HTTP/1.1\r\n\r\n",
            "GET ftp://a.test/ HTTP/1.1\r\n\r\n",
            "GET http:/ HTTP/1.1\r\n\r\n",
            // Not HTTP at all.
            "\x16\x03\x01\x02\x00",
        ] {
            assert!(handed_off(h), "{h:?}");
        }
        // Over the head limit, complete or not.
        let big = format!("GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(200));
        assert_eq!(classify(big.as_bytes(), 100), Parsed::Handoff);
        assert_eq!(classify(&big.as_bytes()[..150], 100), Parsed::Handoff);
        // A partial head as long as the limit cannot grow into one within it.
        assert_eq!(classify(&big.as_bytes()[..100], 100), Parsed::Handoff);
        assert_eq!(classify(&big.as_bytes()[..99], 100), Parsed::Partial);
        // Too many headers (hyper's limit).
        let many: String = (0..101).map(|i| format!("X-{i}: 1\r\n")).collect();
        assert!(handed_off(&format!("GET http://a.test/ HTTP/1.1\r\n{many}\r\n")));
    }

    /// A head cut at every byte: each prefix is `Partial` or handed off, never relayed as a
    /// shorter request, and the whole head is classified as it is in one piece.
    #[test]
    fn a_head_split_at_every_byte_is_classified_as_the_whole() {
        for h in [
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nX: y\r\n\r\nabc",
            "GET http://a.test/ HTTP/1.1\r\nX: 1\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX: 1\r\n\n",
            "GET http://a.test/ HTTP/1.1\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\nGET http://b.test/ HTTP/1.1\r\n\r\n",
        ] {
            let b = h.as_bytes();
            let whole = classify(b, 65536);
            for cut in 0..b.len() {
                match classify(&b[..cut], 65536) {
                    Parsed::Partial => {}
                    Parsed::Handoff => assert_eq!(whole, Parsed::Handoff, "{h:?} at {cut}"),
                    Parsed::Simple(s) => assert_eq!(Parsed::Simple(s), whole, "{h:?} at {cut}"),
                }
            }
        }
        // A bare LF ending the head is never relayed, whatever the cut.
        assert!(handed_off("GET http://a.test/ HTTP/1.1\r\nX: 1\n\n"));
        // Names with a trailing space or tab, NUL/CR/obs-text, CL spellings.
        for h in [
            "GET http://a.test/ HTTP/1.1\r\nContent-Length\t: 1\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX\0: 1\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX\u{e9}: 1\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\ncontent-length: 1\r\nCONTENT-LENGTH: 1\r\n\r\n",
            "POST http://a.test/ HTTP/1.1\r\nTRANSFER-ENCODING: identity\r\n\r\n",
        ] {
            assert!(handed_off(h), "{h:?}");
        }
        // Leading zeros are the same number, and the relay writes the length itself.
        assert_eq!(simple("POST http://a.test/ HTTP/1.1\r\nContent-Length: 007\r\n\r\n").body, 7);
    }

    /// Nineteen digits always fit in a `u64`; a longer value is handed off even when its leading
    /// zeros would make it a small number.
    #[test]
    fn a_content_length_has_at_most_nineteen_digits() {
        let head = |v: &str| format!("POST http://a.test/ HTTP/1.1\r\nContent-Length: {v}\r\n\r\n");
        assert_eq!(simple(&head("9999999999999999999")).body, 9_999_999_999_999_999_999);
        assert_eq!(simple(&head("0000000000000000007")).body, 7);
        assert!(handed_off(&head("00000000000000000007")));
        assert!(handed_off(&head("10000000000000000000")));
    }

    #[test]
    fn response_framing_follows_hypers_client_rules() {
        let framing = |h: &str, head: bool| {
            parse_response(h.as_bytes(), head).map(|r| r.map(|r| (r.framing, r.reusable)))
        };
        use Framing::*;
        let ok = |h: &str| framing(h, false).unwrap().unwrap();
        assert_eq!(ok("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), (Length(5), true));
        assert_eq!(ok("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"), (Length(5), true));
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            (Chunked, true)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            (Chunked, true)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
            (Close, false)
        );
        assert_eq!(ok("HTTP/1.1 200 OK\r\n\r\n"), (Close, false));
        assert_eq!(ok("HTTP/1.1 204 No Content\r\n\r\n"), (None, true));
        assert_eq!(ok("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n"), (None, true));
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"),
            (Length(5), false)
        );
        assert_eq!(ok("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n"), (Length(5), false));
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).unwrap().unwrap(),
            (None, true)
        );
        let h = b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n";
        assert!(parse_response(h, true).unwrap().unwrap().headers.is_empty());
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: y\r\n z\r\n\r\n",
        ] {
            assert!(framing(bad, false).is_err(), "{bad:?}");
        }
        assert!(framing("HTTP/1.1 200 OK\r\nContent-Le", false).unwrap().is_none());
    }

    #[test]
    fn response_hop_by_hop_headers_are_removed() {
        let h = b"HTTP/1.1 200 OK\r\nConnection: x-a\r\nX-A: 1\r\nKeep-Alive: 5\r\n\
                  Transfer-Encoding: chunked\r\nProxy-Authenticate: x\r\nUpgrade: y\r\nX-B: 2\r\n\r\n";
        let r = parse_response(h, false).unwrap().unwrap();
        let names: Vec<&[u8]> = r.headers.iter().map(|(n, _)| &h[n.clone()]).collect();
        assert_eq!(names, [&b"X-B"[..]]);
    }

    #[test]
    fn chunked_bodies_are_parsed_strictly() {
        assert_eq!(chunk_size(b"5\r\nhello"), Ok(Chunk::Data { skip: 3, n: 5 }));
        assert_eq!(chunk_size(b"A;x=y\r\n"), Ok(Chunk::Data { skip: 7, n: 10 }));
        assert_eq!(chunk_size(b"5"), Ok(Chunk::NeedMore));
        assert_eq!(chunk_size(b"0\r\n\r\nrest"), Ok(Chunk::End { skip: 5 }));
        assert_eq!(chunk_size(b"0\r\nX: 1\r\n\r\n"), Ok(Chunk::End { skip: 11 }));
        assert_eq!(chunk_size(b"0\r\nX: 1\r\n"), Ok(Chunk::NeedMore));
        for bad in [
            &b"5\nhello"[..],
            b"15\n",
            b"\r\n",
            b"x\r\n",
            b"-5\r\n",
            b"0x5\r\n",
            b"5\0\r\n",
            b"1234567890abcdef0\r\n",
            b"0\r\nX: 1\n\r\n",
            b"5\r\r\n",
        ] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
        assert!(chunk_size(&[b'1'; MAX_CHUNK_LINE + 1]).is_err());
    }
}
