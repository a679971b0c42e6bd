//! One client connection: the `request_filter` stage, CONNECT tunnels with the `sni_filter`, and
//! the hand-over of plain HTTP to the forwarding path.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sandgate_config::{Host, NetworkPolicy, Target};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::denial::{Refusal, quote, render_refusal};
use crate::head::{Head, HeadError, connect_target, parse_head};
use crate::io::{ClientStream, Rewind};
use crate::proxy::{Inner, Sandbox, TunnelMode};
use crate::sni::{self, Opening, OpeningParser};
use crate::traits::{ProxyEvent, ProxyToken, SandboxId};
use crate::tunnel::{self, Activity};

/// A TLS fatal alert, access_denied: what a client whose server name is refused receives.
pub(crate) const TLS_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];

/// Why a tunnel was refused after it was opened.
#[derive(Debug)]
pub(crate) struct SniRefusal {
    pub(crate) why: String,
}

/// An event being filled in as a request moves through the stages.
pub(crate) struct Draft {
    pub(crate) event: ProxyEvent,
    pub(crate) start: Instant,
}

impl Draft {
    pub(crate) fn new(sandbox: &SandboxId, method: &str, start: Instant) -> Draft {
        Draft {
            event: ProxyEvent {
                sandbox: sandbox.clone(),
                method: method.to_owned(),
                host: String::new(),
                port: 0,
                decision: "reject",
                rule: String::new(),
                bytes_up: 0,
                bytes_down: 0,
                duration: Duration::ZERO,
                error: None,
            },
            start,
        }
    }

    pub(crate) fn target(&mut self, target: &Target) {
        self.event.host = target.host.to_string();
        self.event.port = target.port;
    }

    pub(crate) fn refused(&mut self, r: &Refusal) {
        self.event.decision = r.verb();
        self.event.rule = r.rule_text();
        if r.status() == 502 {
            self.event.error = Some(r.rule_text());
        }
    }

    /// Stage `logging`.
    pub(crate) fn finish(mut self, inner: &Inner) {
        self.event.duration = self.start.elapsed();
        inner.events.record(self.event);
    }
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

/// Whether `header` (a `Proxy-Authorization` value) carries the sandbox's token.
pub(crate) fn authorized(token: Option<&ProxyToken>, header: Option<&[u8]>) -> bool {
    let Some(token) = token else { return true };
    let Some(header) = header else { return false };
    let text = String::from_utf8_lossy(header);
    let (scheme, value) = text.trim().split_once(' ').unwrap_or(("", ""));
    let presented = if scheme.eq_ignore_ascii_case("basic") {
        match base64_decode(value.trim()) {
            Some(creds) => match creds.iter().position(|&b| b == b':') {
                Some(i) => creds[i + 1..].to_vec(),
                None => return false,
            },
            None => return false,
        }
    } else if scheme.eq_ignore_ascii_case("bearer") {
        value.trim().as_bytes().to_vec()
    } else {
        return false;
    };
    constant_time_eq(&presented, token.as_str().as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 with padding; `None` on anything else.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || chunk[..4 - pad].contains(&b'=') {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

impl Inner {
    /// Serves one accepted connection.
    pub(crate) async fn handle(self: Arc<Self>, sandbox: Arc<Sandbox>, mut client: ClientStream) {
        let start = Instant::now();
        let mut buf = BytesMut::with_capacity(4096);
        let limit = self.config.max_head_bytes;
        let deadline = start + self.config.header_timeout;
        // The first byte tells the protocols apart: 0x05 is a SOCKS5 greeting, never HTTP.
        if crate::socks::sniff(&mut client, &mut buf, deadline).await {
            return self.serve_socks(sandbox, client, buf, start).await;
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
                let mut draft = Draft::new(&sandbox.id, "", start);
                self.refuse(&mut client, &sandbox.policy(), &r, &mut draft).await;
                draft.finish(&self);
                return;
            }
            Err(_) => {
                // A slow client (slowloris): drop it without a word.
                let mut draft = Draft::new(&sandbox.id, "", start);
                draft.event.rule = "request head timeout".into();
                draft.event.error = Some(format!(
                    "no complete request head within {}s",
                    self.config.header_timeout.as_secs()
                ));
                draft.finish(&self);
                return;
            }
        };
        if !head.is_connect() {
            self.serve_http(sandbox, Rewind::new(buf.freeze(), client)).await;
            return;
        }
        let mut draft = Draft::new(&sandbox.id, "CONNECT", start);
        let pending = buf.split_off(head.len);
        self.clone().tunnel_request(&sandbox, client, &head, pending, &mut draft).await;
        draft.finish(&self);
    }

    async fn refuse<W: AsyncWrite + Unpin>(
        &self,
        client: &mut W,
        policy: &NetworkPolicy,
        r: &Refusal,
        draft: &mut Draft,
    ) {
        draft.refused(r);
        let bytes = render_refusal(r, policy).to_bytes();
        let _ = client.write_all(&bytes).await;
        let _ = client.shutdown().await;
    }

    async fn tunnel_request(
        self: Arc<Self>,
        sandbox: &Arc<Sandbox>,
        mut client: ClientStream,
        head: &Head,
        pending: BytesMut,
        draft: &mut Draft,
    ) {
        let policy = sandbox.policy();
        if !authorized(sandbox.token.as_ref(), head.proxy_authorization.as_deref()) {
            return self.refuse(&mut client, &policy, &Refusal::Unauthenticated, draft).await;
        }
        let target = match connect_target(head) {
            Ok(t) => t,
            Err(e) => {
                draft.event.host = head.target.chars().take(300).collect();
                let r =
                    Refusal::Malformed { input: quote(head.target.as_bytes()), why: e.to_string() };
                return self.refuse(&mut client, &policy, &r, draft).await;
            }
        };
        draft.target(&target);
        let admitted = match self.admit(sandbox, &policy, &target, "CONNECT", None).await {
            Ok(a) => a,
            Err(r) => return self.refuse(&mut client, &policy, &r, draft).await,
        };
        draft.event.decision = "allow";
        draft.event.rule = admitted.rule.to_string();
        let upstream = match self.connect(&target, &admitted.addrs).await {
            Ok(s) => s,
            Err(r) => return self.refuse(&mut client, &policy, &r, draft).await,
        };
        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        // Stage `intercept` (hosts named by secrets or HTTP rules) instead of `sni_filter` and
        // `tunnel`.
        if self.intercepts(&policy, &target) {
            let client = Rewind::new(pending.freeze(), client);
            let (sandbox, addrs) = (sandbox.clone(), admitted.addrs);
            return crate::intercept::serve(
                self, sandbox, policy, target, client, upstream, addrs, draft,
            )
            .await;
        }
        self.relay(sandbox, &policy, &target, client, upstream, pending, draft).await;
    }

    /// Stages `sni_filter` and `tunnel` of an admitted, connected tunnel (HTTP CONNECT or SOCKS5),
    /// once the client has been told it is open. `pending` holds bytes the client already sent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn relay(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
        mut client: ClientStream,
        mut upstream: TcpStream,
        pending: BytesMut,
        draft: &mut Draft,
    ) {
        let first =
            match self.sni_filter(sandbox, policy, target, &mut client, &upstream, pending).await {
                Ok(first) => first,
                Err(refusal) => {
                    draft.event.decision = "deny";
                    draft.event.rule = refusal.why.clone();
                    draft.event.error = Some(refusal.why);
                    let _ = client.write_all(&TLS_ACCESS_DENIED).await;
                    if let ClientStream::Tcp(s) = &client {
                        let _ = s.set_zero_linger();
                    }
                    return;
                }
            };
        let activity = Activity::new();
        if !first.is_empty() {
            if let Err(e) = upstream.write_all(&first).await {
                draft.event.error = Some(e.to_string());
                return;
            }
            activity.up.fetch_add(first.len() as u64, std::sync::atomic::Ordering::Relaxed);
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
        (draft.event.bytes_up, draft.event.bytes_down) = activity.totals();
        if let Err(e) = result {
            draft.event.error = Some(e.to_string());
        }
    }

    /// Stage `sni_filter`: reads the client's first bytes (see [`crate::sni`] for what a TLS
    /// opening must be). When they speak TLS, on any port, the ClientHello's server name must be
    /// the CONNECT host or allowed in its own right; a hello without a name passes only when the
    /// CONNECT host is an IP address (allowed as such, so every site on it is). On implicit-TLS
    /// ports ([`sni::is_tls_port`]) anything but TLS is refused. Returns the bytes read, to be sent
    /// upstream before the tunnel starts. Runs once per tunnel, before the splice.
    pub(crate) async fn sni_filter<C: AsyncRead + Unpin>(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
        client: &mut C,
        upstream: &TcpStream,
        mut first: BytesMut,
    ) -> Result<BytesMut, SniRefusal> {
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
                _ = upstream.readable(), if !tls_only => return Ok(first),
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
                Ok(Opening::NotTls) => return Ok(first),
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
        let Some(name) = server_name else {
            if let Host::Ip(_) = target.host {
                return Ok(first);
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
            return Ok(first);
        }
        let sni_target = Target { host, port: target.port };
        if self.allowed_outright(sandbox, policy, &sni_target).await {
            return Ok(first);
        }
        Err(SniRefusal {
            why: format!(
                "TLS server name {} differs from the CONNECT host {} and is not allowed \
                 (domain fronting)",
                sni_target.host, target.host
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_values() {
        assert_eq!(base64_decode("eDp5").as_deref(), Some(&b"x:y"[..]));
        assert_eq!(base64_decode("dXNlcjpzM2NyZXQ=").as_deref(), Some(&b"user:s3cret"[..]));
        assert_eq!(base64_decode("YQ==").as_deref(), Some(&b"a"[..]));
        for bad in ["eDp", "e=p5", "====", "eDp5!"] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_are_checked() {
        let t = ProxyToken::new("s3cret");
        assert!(authorized(None, None));
        assert!(!authorized(Some(&t), None));
        assert!(authorized(Some(&t), Some(b"Basic dXNlcjpzM2NyZXQ=")));
        assert!(authorized(Some(&t), Some(b"bearer s3cret")));
        assert!(!authorized(Some(&t), Some(b"Bearer s3cre")));
        assert!(!authorized(Some(&t), Some(b"Basic eDp5")));
        assert!(!authorized(Some(&t), Some(b"Digest s3cret")));
    }
}
