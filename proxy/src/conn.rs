//! One client connection: tells SOCKS5 from HTTP, reads the first HTTP request head itself, and
//! serves a CONNECT on it as the pipeline's tunnel front end (keeping the raw socket, which
//! splice(2) needs); any other request is handed to the keep-alive server in `forward.rs`. The
//! `sni_filter` stage lives here too.

use std::sync::Arc;

use bytes::BytesMut;
use sandgate_config::{Host, Target};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::ctx::{Ctx, RequestTarget};
use crate::denial::{Refusal, quote, render_refusal_with_grants};
use crate::head::{Head, HeadError, parse_head};
use crate::io::ClientStream;
use crate::proxy::{ProxyShared, Sandbox};
use crate::sni::{self, Opening, OpeningParser};
use crate::tunnel::Activity;

/// Why a tunnel was refused after it was opened.
#[derive(Debug)]
pub(crate) struct SniRefusal {
    pub(crate) why: String,
}

/// How the tunnel's TLS checks ended it early.
#[derive(Debug)]
pub(crate) enum SniEnd {
    /// The opening was refused (the client gets a TLS access_denied alert).
    Refuse(SniRefusal),
    /// A side failed or closed.
    Io(std::io::Error),
}

/// What `sni_filter` read and checked of a tunnel's opening.
pub(crate) struct Opened {
    /// Bytes the client sent already, for the upstream.
    pub(crate) first: BytesMut,
    /// For a TLS opening: where its ClientHello ends in `first`, and the server it named (the
    /// `tunnel` stage holds what follows until the server's first message, so that a second
    /// hello after a HelloRetryRequest is checked too).
    pub(crate) hello: Option<(usize, Option<String>)>,
}

enum ReadHead {
    Closed,
    Bad(HeadError),
}

async fn read_head<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut BytesMut,
    limit: usize,
) -> Result<Head, ReadHead> {
    loop {
        match parse_head(buf, limit) {
            Ok(Some(head)) => return Ok(head),
            Ok(None) => {}
            Err(e) => return Err(ReadHead::Bad(e)),
        }
        buf.reserve(4096);
        match s.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(ReadHead::Closed),
            Ok(_) => {}
        }
    }
}

impl ProxyShared {
    /// Serves one accepted connection.
    pub(crate) async fn handle(self: Arc<Self>, sandbox: Arc<Sandbox>, mut client: ClientStream) {
        let start = Instant::now();
        // A connection the namespace's firewall redirected here (transparent capture).
        let redirected = crate::transparent::original_destination(&client);
        let process = self.attribute(&sandbox, &client, redirected);
        if let Some(to) = redirected {
            return self.serve_transparent(sandbox, client, to, start, process).await;
        }
        let mut buf = BytesMut::with_capacity(4096);
        let limit = self.config.max_head_bytes;
        let deadline = start + self.config.header_timeout;
        // The first byte tells the protocols apart: 0x05 is a SOCKS5 greeting, never HTTP.
        if crate::socks::sniff(&mut client, &mut buf, deadline).await {
            return self.serve_socks(sandbox, client, buf, start, process).await;
        }
        let head = tokio::time::timeout_at(deadline, read_head(&mut client, &mut buf, limit)).await;
        let head = match head {
            Ok(Ok(head)) => head,
            Ok(Err(ReadHead::Closed)) => return,
            Ok(Err(ReadHead::Bad(e))) => {
                let r = Refusal::Malformed {
                    input: quote(&buf[..buf.len().min(80)]),
                    why: e.to_string(),
                };
                let mut ctx = Ctx::new(sandbox, "", start).with_process(&process);
                self.refuse_head(&mut client, &mut ctx, &r).await;
                return self.logging(ctx);
            }
            Err(_) => {
                // A slow client (slowloris): drop it without a word.
                let mut ctx = Ctx::new(sandbox, "", start).with_process(&process);
                ctx.event.rule = "request head timeout".into();
                ctx.event.error = Some(format!(
                    "no complete request head within {}s",
                    self.config.header_timeout.as_secs()
                ));
                return self.logging(ctx);
            }
        };
        if !head.is_connect() {
            // Every request of a keep-alive connection, this first one included, goes through
            // the relay (`relay.rs`), or hyper's path in `forward.rs` for what the relay hands on.
            self.relay_http(sandbox, client, buf, process).await;
            return;
        }
        let mut ctx = Ctx::new(sandbox, "CONNECT", start).with_process(&process);
        let pending = buf.split_off(head.len);
        self.connect_request(&mut ctx, client, &head, pending).await;
        self.logging(ctx);
    }

    /// The CONNECT front end on a fresh connection: `request_filter`, the stages up to
    /// `connect`, "200 Connection established", then the tunnel stages.
    async fn connect_request(
        self: &Arc<Self>,
        ctx: &mut Ctx,
        mut client: ClientStream,
        head: &Head,
        pending: BytesMut,
    ) {
        let target = RequestTarget::Authority(&head.target);
        if let Err(r) = self.request_filter(ctx, target, head.proxy_authorization.as_deref()) {
            return self.refuse_head(&mut client, ctx, &r).await;
        }
        let upstream = match self.open_tunnel(ctx).await {
            Ok(s) => s,
            Err(r) => return self.refuse_head(&mut client, ctx, &r).await,
        };
        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        self.tunnel_stages(ctx, client, upstream, pending).await;
    }

    /// Stage `sni_filter`: reads the client's first bytes (see [`crate::sni`] for what a TLS
    /// opening must be). When they speak TLS, on any port, the ClientHello's server name must be
    /// the CONNECT host or allowed in its own right; a hello without a name passes only when the
    /// CONNECT host is an IP address (allowed as such, so every site on it is). On implicit-TLS
    /// ports ([`sni::is_tls_port`]) anything but TLS is refused. Returns the bytes read, to be sent
    /// upstream before the tunnel starts. Runs once per tunnel, before the splice.
    pub(crate) async fn sni_filter<C: AsyncRead + Unpin>(
        &self,
        ctx: &Ctx,
        client: &mut C,
        upstream: &TcpStream,
        mut first: BytesMut,
    ) -> Result<Opened, SniRefusal> {
        let opened = |first, hello| Ok(Opened { first, hello });
        let target = ctx.target().map_err(|r| SniRefusal { why: r.rule_text() })?;
        let tls_only = sni::is_tls_port(target.port);
        if first.is_empty() {
            first.reserve(4096);
            tokio::select! {
                r = client.read_buf(&mut first) => match r {
                    Ok(_) => {}
                    Err(e) => return Err(SniRefusal { why: format!("client read failed: {e}") }),
                },
                // The server speaks first (SSH, SMTP, ...): no ClientHello is coming. A TLS port's
                // server never does, so there the client's first bytes are awaited regardless.
                _ = upstream.readable(), if !tls_only => return opened(first, None),
                () = tokio::time::sleep(self.config.idle_timeout) => {
                    return Err(SniRefusal { why: "tunnel idle before the first byte".into() });
                }
            }
        }
        let deadline = Instant::now() + self.config.header_timeout;
        let mut parser = OpeningParser::new();
        let server_name = loop {
            match parser.advance(&first) {
                Ok(Opening::ClientHello { server_name }) => break server_name,
                Ok(Opening::NotTls) if tls_only => {
                    return Err(SniRefusal {
                        why: format!(
                            "port {} carries only TLS, and the tunnel did not open with a TLS \
                             ClientHello",
                            target.port
                        ),
                    });
                }
                Ok(Opening::NotTls) => return opened(first, None),
                Ok(Opening::NeedMore) => {}
                Err(e) => return Err(SniRefusal { why: format!("TLS ClientHello refused: {e}") }),
            }
            first.reserve(4096);
            match tokio::time::timeout_at(deadline, client.read_buf(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(Ok(_)) | Ok(Err(_)) => {
                    return Err(SniRefusal {
                        why: "the client closed during the TLS ClientHello".into(),
                    });
                }
                Err(_) => return Err(SniRefusal { why: "TLS ClientHello timed out".into() }),
            }
        };
        let hello = Some((parser.consumed(), server_name.clone()));
        let Some(name) = server_name else {
            if let Host::Ip(_) = target.host {
                return opened(first, hello);
            }
            return Err(SniRefusal {
                why: format!(
                    "the TLS ClientHello names no server (no SNI), so the server at {} would pick \
                     a site the proxy cannot check",
                    target.host
                ),
            });
        };
        let host = sni::server_host(&name).map_err(|e| SniRefusal {
            why: format!("TLS server name {}: {e}", quote(name.as_bytes())),
        })?;
        let host = Host::Name(host);
        if host == target.host {
            return opened(first, hello);
        }
        let sni_target = Target { host, port: target.port };
        if self.allowed_outright(&ctx.sandbox, &ctx.policy, &sni_target).await {
            return opened(first, hello);
        }
        let decided = match ctx.event.method.as_str() {
            crate::transparent::EVENT_METHOD => "the name the connection was decided by",
            "SOCKS5" => "the SOCKS host",
            _ => "the CONNECT host",
        };
        Err(SniRefusal {
            why: format!(
                "TLS server name {} differs from {decided} {} and is not allowed \
                 (domain fronting)",
                sni_target.host, target.host
            ),
        })
    }

    /// Waits for the server's first handshake message while holding what the client sends after
    /// its ClientHello (see [`crate::sni`], "A second ClientHello"). Server bytes go down to the
    /// client as they come; the held bytes go up once the server's message is not a
    /// HelloRetryRequest, or once the client's second hello names `name` again.
    pub(crate) async fn second_hello<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        client: &mut C,
        upstream: &mut TcpStream,
        mut held: BytesMut,
        name: Option<String>,
        activity: &Activity,
    ) -> Result<(), SniEnd> {
        use std::sync::atomic::Ordering::Relaxed;
        let deadline = Instant::now() + self.config.idle_timeout;
        let mut server = Vec::new();
        let mut verdict = sni::ServerFirst::NeedMore;
        let mut second = sni::SecondHello::new();
        let mut down = BytesMut::with_capacity(4096);
        let (mut client_open, mut server_open) = (true, true);
        loop {
            match verdict {
                sni::ServerFirst::Other => return send_up(upstream, &held, activity).await,
                sni::ServerFirst::HelloRetry => match second.advance(&held) {
                    Ok(Some(again)) if again == name => {
                        return send_up(upstream, &held, activity).await;
                    }
                    Ok(Some(again)) => {
                        let shown = |n: &Option<String>| match n {
                            Some(n) => quote(n.as_bytes()),
                            None => "no server".into(),
                        };
                        return Err(SniEnd::Refuse(SniRefusal {
                            why: format!(
                                "the second TLS ClientHello (after a HelloRetryRequest) names {}, \
                                 the first named {}",
                                shown(&again),
                                shown(&name)
                            ),
                        }));
                    }
                    Ok(None) if !client_open => {
                        return Err(SniEnd::Io(std::io::Error::other(
                            "the client closed during its second ClientHello",
                        )));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(SniEnd::Refuse(SniRefusal {
                            why: format!("second TLS ClientHello refused: {e}"),
                        }));
                    }
                },
                sni::ServerFirst::NeedMore => {}
            }
            if !server_open && verdict == sni::ServerFirst::NeedMore {
                // The server is gone before it said anything: nothing the client holds matters.
                return Ok(());
            }
            if !client_open && held.is_empty() && verdict == sni::ServerFirst::NeedMore {
                // The client is gone after its one hello: no second hello can follow, so there
                // is nothing to check; the tunnel passes the end on (a server that never answers
                // would otherwise hold the upstream open until the idle deadline).
                return Ok(());
            }
            // Hold at most one opening's worth: a client that sends more waits (back-pressure).
            let read_client = client_open && held.len() <= sni::MAX_OPENING;
            down.clear();
            tokio::select! {
                r = client.read_buf(&mut held), if read_client => match r {
                    Ok(0) => client_open = false,
                    Ok(_) => {}
                    Err(e) => return Err(SniEnd::Io(e)),
                },
                r = upstream.read_buf(&mut down), if server_open => match r {
                    Ok(0) => server_open = false,
                    Ok(n) => {
                        client.write_all(&down).await.map_err(SniEnd::Io)?;
                        activity.down.fetch_add(n as u64, Relaxed);
                        if verdict == sni::ServerFirst::NeedMore {
                            server.extend_from_slice(&down);
                            verdict = sni::server_first(&server);
                        }
                    }
                    Err(e) => return Err(SniEnd::Io(e)),
                },
                () = tokio::time::sleep_until(deadline) => {
                    return Err(SniEnd::Refuse(SniRefusal {
                        why: "TLS handshake idle before the server's first message".into(),
                    }));
                }
            }
        }
    }
}

/// Writes `bytes` to the upstream and counts them.
pub(crate) async fn send_up(
    upstream: &mut TcpStream,
    bytes: &[u8],
    activity: &Activity,
) -> Result<(), SniEnd> {
    if !bytes.is_empty() {
        upstream.write_all(bytes).await.map_err(SniEnd::Io)?;
        activity.up.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

impl ProxyShared {
    /// Refuses a request on a connection the proxy reads itself: the event (recorded before the
    /// client hears, see `record_refusal`), the refusal's response, then the connection's end.
    async fn refuse_head<W: AsyncWrite + Unpin>(&self, client: &mut W, ctx: &mut Ctx, r: &Refusal) {
        ctx.refused(r);
        self.record_refusal(ctx).await;
        let bytes =
            render_refusal_with_grants(r, &ctx.policy, &self.granted(&ctx.sandbox)).to_bytes();
        let _ = client.write_all(&bytes).await;
        let _ = client.shutdown().await;
    }
}
