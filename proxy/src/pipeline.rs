//! The pipeline: one per-request context ([`Ctx`]) and one function per named stage, shared by
//! every front end — an HTTP CONNECT on a fresh connection (`conn.rs`), plain HTTP and a CONNECT on
//! a keep-alive connection (`forward.rs`), and SOCKS5 (`socks.rs`):
//!
//! ```text
//! request_filter → decide → ask → upstream_peer → connect → sni_filter → (intercept | tunnel | forward) → logging
//! ```
//!
//! A front end owns only what its protocol does differently: how a request is read, and how a
//! refusal or an open tunnel is told to the client. Everything that decides is here (or in
//! `proxy.rs`, `decide` → `ask` → `upstream_peer` → `connect`), written once: there is one token
//! check, one target parser per request form, one tunnel path (splice or copy, whichever front end
//! opened it), and one place an event is recorded.

use std::sync::Arc;

use bytes::BytesMut;
use sandgate_config::Target;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::conn::{Opened, SniEnd, SniRefusal, send_up};
use crate::ctx::{Ctx, Presented, RequestTarget, TLS_ACCESS_DENIED, token_matches};
use crate::denial::{Refusal, quote};
use crate::io::ClientStream;
use crate::proxy::{ProxyShared, TunnelMode};
use crate::traits::Outcome;
use crate::tunnel::{self, Activity};

/// What the `intercept` stage chose for an admitted, connected tunnel.
pub(crate) enum Route {
    /// Move bytes untouched (splice or copy); the client's TLS, if any, ends at the origin.
    Tunnel {
        /// The client, told the tunnel is open.
        client: ClientStream,
        /// The connected upstream.
        upstream: TcpStream,
        /// Bytes the client sent already (its ClientHello, when it speaks TLS), for the upstream,
        /// and where that hello ends.
        opened: Opened,
    },
    /// The interceptor served the connection to its end (and filled in the event).
    Intercepted,
}

impl ProxyShared {
    /// Stage `request_filter` of an HTTP request (CONNECT or absolute form): the sandbox token
    /// (407), then the target, parsed and normalised into `ctx` (400 when malformed; an HTTPS URL
    /// or an origin-form request gets a 400 that says how to use the proxy).
    pub(crate) fn request_filter(
        &self,
        ctx: &mut Ctx,
        target: RequestTarget<'_>,
        proxy_authorization: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        if !token_matches(ctx.sandbox.token.as_ref(), Presented::header(proxy_authorization)) {
            return Err(Refusal::Unauthenticated);
        }
        let parsed = match target {
            RequestTarget::Authority(authority) => Target::parse_authority(authority, None)
                .map_err(|e| {
                    ctx.event.host = authority.chars().take(300).collect();
                    Refusal::Malformed { input: quote(authority.as_bytes()), why: e.to_string() }
                })?,
            RequestTarget::Absolute(uri) => {
                let malformed = |why: String| Refusal::Malformed {
                    input: quote(uri.to_string().as_bytes()),
                    why,
                };
                match uri.scheme_str() {
                    None => return Err(Refusal::OriginForm),
                    Some(s) if s.eq_ignore_ascii_case("http") => {}
                    Some(s) if s.eq_ignore_ascii_case("https") => {
                        let target = uri.authority().map(|a| a.to_string()).unwrap_or_default();
                        return Err(Refusal::HttpsWithoutConnect { target });
                    }
                    Some(s) => {
                        return Err(malformed(format!(
                            "unsupported scheme {s:?}; only http:// URLs are forwarded"
                        )));
                    }
                }
                let Some(authority) = uri.authority() else {
                    return Err(malformed("the URL has no host".into()));
                };
                Target::parse_authority(authority.as_str(), Some(80))
                    .map_err(|e| malformed(e.to_string()))?
            }
        };
        ctx.set_target(parsed);
        Ok(())
    }

    /// Stages `decide` → `ask` → `upstream_peer`: the rule that lets the request through goes
    /// into the event, the checked addresses into `ctx.addrs`.
    pub(crate) async fn admit(&self, ctx: &mut Ctx, path: Option<&str>) -> Result<(), Refusal> {
        let target = ctx.target()?;
        let admitted = self.admit_target(
            &ctx.sandbox,
            &ctx.policy,
            target,
            &ctx.event.method,
            path,
            &ctx.process,
        );
        let admitted = admitted.await?;
        ctx.event.decision = Outcome::Allow;
        ctx.event.rule = admitted.rule.to_string();
        ctx.addrs = admitted.addrs;
        Ok(())
    }

    /// Stage `connect` of a tunnel: the checked addresses in order (or the upstream proxy).
    pub(crate) async fn connect_upstream(&self, ctx: &Ctx) -> Result<TcpStream, Refusal> {
        self.connect(ctx.target()?, &ctx.addrs).await
    }

    /// Stages `request_filter`'s successors for a tunnel, up to the point where the client must
    /// be told it is open: `decide` → `ask` → `upstream_peer` → `connect`.
    pub(crate) async fn open_tunnel(&self, ctx: &mut Ctx) -> Result<TcpStream, Refusal> {
        self.admit(ctx, None).await?;
        self.connect_upstream(ctx).await
    }

    /// The one tunnel path, after the client was told the tunnel is open (HTTP CONNECT on a fresh
    /// or a keep-alive connection, SOCKS5): `sni_filter` → `intercept` | `tunnel`. `pending`
    /// holds bytes the client sent already.
    pub(crate) async fn tunnel_stages(
        self: &Arc<Self>,
        ctx: &mut Ctx,
        mut client: ClientStream,
        upstream: TcpStream,
        pending: BytesMut,
    ) {
        let mut opened = match self.sni_filter(ctx, &mut client, &upstream, pending).await {
            Ok(opened) => opened,
            Err(refusal) => {
                self.refuse_tls(ctx, &mut client, refusal).await;
                return;
            }
        };
        // Plain HTTP in a CONNECT or SOCKS tunnel: its `Host` is pinned to the decided target as
        // on the transparent door. That door pinned a head it read before the connect already
        // (pinning it again changes nothing), but not one that came only after its wait for the
        // client's first bytes ended: it is pinned here.
        if opened.hello.is_none()
            && let Err(why) = self.pin_http_head(ctx, &mut client, &mut opened.first).await
        {
            let input = crate::denial::quote(&opened.first[..opened.first.len().min(80)]);
            let r = Refusal::Malformed { input, why };
            ctx.refused(&r);
            self.record_refusal(ctx).await;
            let page = crate::denial::render_refusal_with_grants(
                &r,
                &ctx.policy,
                &self.granted(&ctx.sandbox),
            );
            let _ = client.write_all(&page.to_bytes()).await;
            let _ = client.shutdown().await;
            return;
        }
        match self.intercept(ctx, client, upstream, opened).await {
            Route::Tunnel { client, upstream, opened } => {
                self.tunnel(ctx, client, upstream, opened).await;
            }
            Route::Intercepted => {}
        }
    }

    /// Stage `intercept`: the hook where TLS interception (for hosts with secrets or HTTP rules)
    /// takes over a tunnel. It runs after `sni_filter` has checked the ClientHello (in `first`)
    /// and `connect` has opened `upstream` to a checked address, with `ctx` naming the sandbox,
    /// its policy, the target and the deciding rule. An interceptor that claims the connection
    /// terminates the client's TLS with a leaf of the local CA, speaks TLS to `upstream`, records
    /// what it did in `ctx.event`, and returns [`Route::Intercepted`]; otherwise it hands
    /// everything back untouched as [`Route::Tunnel`], so the client sees the origin's own
    /// certificate.
    ///
    /// Only hosts that a `[[secrets]]` or `[[http_rules]]` entry names are intercepted
    /// ([`crate::intercept::serve`]); every other tunnel is a tunnel.
    async fn intercept(
        self: &Arc<Self>,
        ctx: &mut Ctx,
        client: ClientStream,
        upstream: TcpStream,
        opened: Opened,
    ) -> Route {
        let target = match &ctx.target {
            Some(t) if self.intercepts(&ctx.policy, t) => t.clone(),
            _ => return Route::Tunnel { client, upstream, opened },
        };
        // The ClientHello `sni_filter` read (and checked) goes to the interceptor's TLS server.
        let client = crate::io::Rewind::new(opened.first.freeze(), client);
        let (sandbox, policy, addrs) = (ctx.sandbox.clone(), ctx.policy.clone(), ctx.addrs.clone());
        crate::intercept::serve(
            self.clone(),
            sandbox,
            policy,
            target,
            client,
            upstream,
            addrs,
            &mut ctx.event,
            ctx.process.clone(),
        )
        .await;
        Route::Intercepted
    }

    /// Stage `tunnel`: the client's first bytes to the upstream — for a TLS opening, what follows
    /// its ClientHello only once the server's first message is not a HelloRetryRequest or the
    /// second hello names the same server ([`ProxyShared::second_hello`]) — then bytes both ways
    /// (splice(2) or a copy) until both sides are done or the tunnel sits idle.
    async fn tunnel(
        &self,
        ctx: &mut Ctx,
        mut client: ClientStream,
        mut upstream: TcpStream,
        opened: Opened,
    ) {
        let activity = Activity::new();
        let Opened { mut first, hello } = opened;
        let sent = match hello {
            None => send_up(&mut upstream, &first, &activity).await,
            Some((end, name)) => {
                let held = first.split_off(end);
                match send_up(&mut upstream, &first, &activity).await {
                    Ok(()) => {
                        self.second_hello(&mut client, &mut upstream, held, name, &activity).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match sent {
            Ok(()) => {}
            Err(SniEnd::Refuse(refusal)) => {
                (ctx.event.bytes_up, ctx.event.bytes_down) = activity.totals();
                self.refuse_tls(ctx, &mut client, refusal).await;
                return;
            }
            Err(SniEnd::Io(e)) => {
                ctx.event.error = Some(e.to_string());
                (ctx.event.bytes_up, ctx.event.bytes_down) = activity.totals();
                return;
            }
        }
        let idle = self.config.idle_timeout;
        let result = match self.config.tunnel_mode {
            #[cfg(target_os = "linux")]
            TunnelMode::Splice => {
                tunnel::splice(&client, &upstream, &self.pipes, &activity, idle).await
            }
            #[cfg(not(target_os = "linux"))]
            TunnelMode::Splice => {
                let buf = self.config.tunnel_buffer;
                tunnel::copy(&mut client, &mut upstream, buf, &activity, idle).await
            }
            TunnelMode::Copy => {
                let buf = self.config.tunnel_buffer;
                tunnel::copy(&mut client, &mut upstream, buf, &activity, idle).await
            }
        };
        (ctx.event.bytes_up, ctx.event.bytes_down) = activity.totals();
        if let Err(e) = result {
            ctx.event.error = Some(e.to_string());
        }
    }

    /// Stage `logging`: the request's one event, with its duration and the process, when its
    /// lookup has ended; a lookup still running records the event when it ends (at most
    /// [`ProxyConfig::attribution_wait`](crate::ProxyConfig) later), so that no connection
    /// waits for it.
    pub(crate) fn logging(&self, ctx: Ctx) {
        if ctx.recorded {
            return;
        }
        let mut event = ctx.event;
        event.duration = ctx.start.elapsed();
        if event.process.is_none() {
            event.process = ctx.process.now();
        }
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(rt) if event.process.is_none() && ctx.process.looking() => {
                let (events, wait) = (self.events.clone(), self.config.attribution_wait);
                rt.spawn(async move {
                    event.process = ctx.process.wait(wait).await;
                    events.record(event);
                });
            }
            _ => self.events.record(event),
        }
    }

    /// Puts the process in `ctx`'s event, waiting for its lookup at most
    /// [`ProxyConfig::attribution_wait`](crate::ProxyConfig): for an event that must be recorded
    /// before the client hears of it.
    pub(crate) async fn settle(&self, ctx: &mut Ctx) {
        if ctx.event.process.is_none() {
            ctx.event.process = ctx.process.wait(self.config.attribution_wait).await;
        }
    }

    /// `logging` for a refusal, before the client is told: whoever follows the events (the
    /// launcher saying "denied" on the command's stderr) hears of it before the command can
    /// have seen the refusal and ended. Waits for the process's lookup (bounded: refusals are
    /// not the path whose speed counts). The later `logging` of `ctx` does nothing.
    pub(crate) async fn record_refusal(&self, ctx: &mut Ctx) {
        self.settle(ctx).await;
        let mut event = ctx.event.clone();
        event.duration = ctx.start.elapsed();
        self.events.record(event);
        ctx.recorded = true;
    }

    /// Ends a tunnel whose TLS opening was refused: the event says why (recorded first), the
    /// client gets a TLS access_denied alert, then a reset.
    async fn refuse_tls(&self, ctx: &mut Ctx, client: &mut ClientStream, refusal: SniRefusal) {
        ctx.event.decision = Outcome::Deny;
        ctx.event.rule = refusal.why.clone();
        ctx.event.error = Some(refusal.why);
        self.record_refusal(ctx).await;
        // Server bytes may still be unacknowledged (a HelloRetryRequest went down): send the
        // alert at once, or Nagle holds it and the reset below discards it.
        if let ClientStream::Tcp(s) = client {
            let _ = s.set_nodelay(true);
        }
        let _ = client.write_all(&TLS_ACCESS_DENIED).await;
        if let ClientStream::Tcp(s) = client {
            let _ = s.set_zero_linger();
        }
    }
}
