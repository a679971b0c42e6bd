//! The DNS stub a sandbox's resolver talks to (UDP and TCP port 53 on the loopback of its network
//! namespace), put through the same `decide` stage as the proxy, without a port.
//!
//! - A host name no deny rule refuses is answered with an IPv4 address of the sandbox's own
//!   ([`names`](crate::names): one per name, from 198.18.0.0/15), and nothing else: AAAA and
//!   every other type get no data. Nothing is resolved on the host, so a lookup carries no data
//!   out (`secret.attacker.example`) and asks nobody (resolvers retry within seconds and look up
//!   names speculatively, so holding a query would only time it out). The connection that
//!   follows is what is decided — by that name, allowed, granted or asked, as a CONNECT is — and
//!   the name is resolved then, on the host, through the address guard
//!   ([`transparent`](crate::transparent)).
//! - A name a deny rule refuses, and anything that is not a host name, is answered NXDOMAIN at
//!   once, and the refusal is an event (refusals under one registrable domain are counted into
//!   one event a minute: [`dns_log`](crate::dns_log)).
//! - Only standard queries (one question, class IN) are answered; anything else gets FORMERR,
//!   NOTIMP or REFUSED, and bytes that are not a DNS message at all get no answer. The wire
//!   format is hickory-proto's (compression pointers must point backwards, so label loops end).
//!
//! The wire handling is pure ([`read_query`], [`response`]) so that it can be fuzzed without a
//! socket; [`Proxy::serve_dns`] is the thin I/O edge.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use sandgate_config::{Decision, DomainName, Host, Rule, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::denial::quote;
use crate::dns_log::Note;
use crate::proxy::{Proxy, ProxyShared, Sandbox, SandboxContext};
use crate::traits::Outcome as EventOutcome;

pub use crate::dns_log::EVENT_METHOD;

/// Largest query taken, in bytes (UDP datagram or TCP message): a question is at most ~270 bytes
/// plus EDNS options; anything longer is refused unread.
pub const MAX_QUERY: usize = 1232;
/// Addresses of one type in an answer: keeps every answer under 512 bytes (no truncation).
const MAX_ADDRESSES: usize = 8;
/// How long an answer may be cached by the sandbox's resolver (a name keeps its address for the
/// sandbox's life; the TTL only bounds how long a client trusts a name the policy came to deny).
pub const TTL: Duration = Duration::from_secs(60);
/// Ports whose grants let a name resolve (grants are port-scoped; a lookup has no port).
const GRANT_PORTS: [u16; 2] = [443, 80];

/// Why a message is not a query the stub answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// More than [`MAX_QUERY`] bytes.
    #[error("{0} bytes is longer than any query ({MAX_QUERY} at most)")]
    TooLong(usize),
    /// Not a DNS message (hickory-proto's decoder refused it).
    #[error("not a DNS message: {0}")]
    Undecodable(String),
    /// A response, not a query.
    #[error("a response, not a query")]
    NotAQuery,
    /// An opcode other than QUERY (NOTIFY, UPDATE, ...).
    #[error("opcode {0:?} is not served (only QUERY)")]
    OpCode(OpCode),
    /// Not exactly one question.
    #[error("{0} questions (exactly one is served)")]
    Questions(usize),
    /// A class other than IN.
    #[error("class {0:?} is not served (only IN)")]
    Class(DNSClass),
}

impl QueryError {
    /// The response code a query refused for this reason gets.
    pub fn rcode(&self) -> ResponseCode {
        match self {
            QueryError::OpCode(_) => ResponseCode::NotImp,
            QueryError::Class(_) => ResponseCode::Refused,
            QueryError::TooLong(_)
            | QueryError::Undecodable(_)
            | QueryError::NotAQuery
            | QueryError::Questions(_) => ResponseCode::FormErr,
        }
    }
}

/// A query refused before it was decided, and the id to answer it with (none when the bytes
/// do not even hold a header, or are a response: those get no answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The id of the message, when it is worth an answer.
    pub id: Option<u16>,
    /// Why.
    pub error: QueryError,
}

/// A standard query, read and checked.
#[derive(Clone, Debug)]
pub struct DnsQuery {
    /// The message id.
    pub id: u16,
    /// Whether recursion was desired (echoed).
    pub recursion_desired: bool,
    /// The question as sent (echoed).
    pub query: Query,
    /// The name as a host, or why it is not a host name (an underscore label, a byte outside
    /// letters, digits and `-`, an escaped dot, over-long).
    pub host: Result<Host, String>,
    /// The name as text for events (escaped).
    pub name_text: String,
    /// Whether the query carried EDNS (the answer then does too).
    pub edns: bool,
}

/// Reads one query. Pure: no I/O, no panics on any input.
pub fn read_query(bytes: &[u8]) -> Result<DnsQuery, Malformed> {
    let header_id = (bytes.len() >= 12).then(|| u16::from_be_bytes([bytes[0], bytes[1]]));
    // Bit 7 of byte 2 is QR: never answer a response (no reflection loops).
    let is_response = bytes.get(2).is_some_and(|b| b & 0x80 != 0);
    let id = if is_response { None } else { header_id };
    if bytes.len() > MAX_QUERY {
        return Err(Malformed { id, error: QueryError::TooLong(bytes.len()) });
    }
    let message = Message::from_vec(bytes)
        .map_err(|e| Malformed { id, error: QueryError::Undecodable(e.to_string()) })?;
    let meta = &message.metadata;
    if meta.message_type != MessageType::Query {
        return Err(Malformed { id: None, error: QueryError::NotAQuery });
    }
    let id = Some(meta.id);
    if meta.op_code != OpCode::Query {
        return Err(Malformed { id, error: QueryError::OpCode(meta.op_code) });
    }
    if message.queries.len() != 1 {
        return Err(Malformed { id, error: QueryError::Questions(message.queries.len()) });
    }
    let query = message.queries[0].clone();
    if query.query_class() != DNSClass::IN {
        return Err(Malformed { id, error: QueryError::Class(query.query_class()) });
    }
    let (host, name_text) = host_of(query.name());
    Ok(DnsQuery {
        id: meta.id,
        recursion_desired: meta.recursion_desired,
        query,
        host,
        name_text,
        edns: message.edns.is_some(),
    })
}

/// The name as a [`Host`], by the same parser as every other host name sandgate reads. Each
/// label is checked byte by byte first: DNS labels may hold any byte (a NUL, a dot), host names
/// may not, and an escaped form must never be what gets parsed.
fn host_of(name: &Name) -> (Result<Host, String>, String) {
    let mut text = String::new();
    let mut bad = None;
    for (i, label) in name.iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if label.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-') {
            text.push_str(std::str::from_utf8(label).unwrap_or_default());
        } else {
            text.push_str(&quote(label));
            bad.get_or_insert_with(|| format!("label {} is not a host name label", quote(label)));
        }
    }
    if text.is_empty() {
        return (Err("the root is not a host".into()), ".".into());
    }
    let host = match bad {
        Some(why) => Err(why),
        None => Host::parse(&text).map_err(|e| e.to_string()),
    };
    (host, text)
}

/// What a question is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsReply {
    /// These addresses (those of the question's type are put in the answer; none: NODATA).
    Addresses(Vec<IpAddr>),
    /// NXDOMAIN: refused, or no such name.
    NxDomain,
    /// SERVFAIL: the host could not resolve an allowed name.
    ServFail,
}

/// The response to `q`. Pure.
pub fn response(q: &DnsQuery, outcome: &DnsReply) -> Vec<u8> {
    let mut m = Message::response(q.id, OpCode::Query);
    m.metadata.recursion_desired = q.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_query(q.query.clone());
    if q.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_QUERY as u16);
        m.set_edns(edns);
    }
    match outcome {
        DnsReply::NxDomain => m.metadata.response_code = ResponseCode::NXDomain,
        DnsReply::ServFail => m.metadata.response_code = ResponseCode::ServFail,
        DnsReply::Addresses(addrs) => {
            let name = q.query.name().clone();
            let ttl = TTL.as_secs() as u32;
            let data = addrs.iter().filter_map(|ip| match (q.query.query_type(), ip) {
                (RecordType::A, IpAddr::V4(v4)) => Some(RData::A(A(*v4))),
                (RecordType::AAAA, IpAddr::V6(v6)) => Some(RData::AAAA(AAAA(*v6))),
                _ => None,
            });
            for d in data.take(MAX_ADDRESSES) {
                m.add_answer(Record::from_rdata(name.clone(), ttl, d));
            }
        }
    }
    m.to_vec().unwrap_or_else(|_| error_response(q.id, ResponseCode::ServFail))
}

/// A bare response with `rcode` and no question (for queries that could not be read).
pub fn error_response(id: u16, rcode: ResponseCode) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&id.to_be_bytes());
    out.push(0x80); // QR = response, opcode QUERY
    out.push(0x80 | (u16::from(rcode) as u8 & 0x0f)); // RA, rcode
    out.extend_from_slice(&[0; 8]);
    out
}

impl Proxy {
    /// Records now the summaries of the DNS refusals counted for `sandbox` (for every sandbox:
    /// `None`) in windows that have not ended yet: the sandbox ended, or the proxy shuts down
    /// ([`Proxy::shutdown`] calls it), and no count may be lost.
    pub fn flush_dns_refusals(&self, sandbox: Option<&crate::SandboxId>) {
        for summary in self.inner.dns_cache.refusals.close(sandbox) {
            self.inner.events.record(summary);
        }
    }

    /// Serves the DNS stub of one sandbox on a UDP socket and/or a TCP listener (both bound to
    /// port 53 of the sandbox's loopback, made inside its namespace) until [`Proxy::shutdown`].
    /// Shares the sandbox's state (policy, grants) with its proxy listener. Must be called inside
    /// a tokio runtime.
    pub async fn serve_dns(
        &self,
        udp: Option<UdpSocket>,
        tcp: Option<TcpListener>,
        ctx: SandboxContext,
    ) -> io::Result<()> {
        let sandbox = self.register(ctx);
        let udp = udp.map(Arc::new);
        let mut stop = self.inner.shutdown.subscribe();
        let serve_udp = async {
            let Some(sock) = &udp else { return std::future::pending::<io::Result<()>>().await };
            let mut buf = vec![0u8; MAX_QUERY + 1];
            loop {
                let (n, from) = match sock.recv_from(&mut buf).await {
                    Ok(r) => r,
                    // An ICMP error of an earlier send, or a full buffer: keep serving.
                    Err(_) => continue,
                };
                let packet = buf[..n].to_vec();
                let (inner, sandbox, sock) = (self.inner.clone(), sandbox.clone(), sock.clone());
                tokio::spawn(async move {
                    if let Some(reply) = inner.answer_dns(&sandbox, &packet).await {
                        let _ = sock.send_to(&reply, from).await;
                    }
                });
            }
        };
        let serve_tcp = async {
            let Some(l) = &tcp else { return std::future::pending::<io::Result<()>>().await };
            loop {
                let (stream, _) = match l.accept().await {
                    Ok(s) => s,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let (inner, sandbox) = (self.inner.clone(), sandbox.clone());
                tokio::spawn(async move { inner.serve_dns_tcp(sandbox, stream).await });
            }
        };
        tokio::select! {
            r = serve_udp => r,
            r = serve_tcp => r,
            _ = stop.wait_for(|s| *s) => Ok(()),
        }
    }
}

impl ProxyShared {
    /// One TCP connection: length-prefixed queries, answered in order, until the client closes,
    /// is idle for the header timeout, or sends a length no query has.
    async fn serve_dns_tcp(self: Arc<Self>, sandbox: Arc<Sandbox>, mut s: TcpStream) {
        let idle = self.config.header_timeout;
        loop {
            let mut len = [0u8; 2];
            match tokio::time::timeout(idle, s.read_exact(&mut len)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let len = u16::from_be_bytes(len) as usize;
            if len > MAX_QUERY || len == 0 {
                let mut d = Ctx::new(sandbox.clone(), EVENT_METHOD, Instant::now());
                d.event.rule = "malformed request".into();
                d.event.error = Some(format!("DNS over TCP: {len}-byte message refused unread"));
                self.record_dns_refusal(d);
                return;
            }
            let mut msg = vec![0u8; len];
            match tokio::time::timeout(idle, s.read_exact(&mut msg)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            if let Some(reply) = self.answer_dns(&sandbox, &msg).await {
                let mut framed = Vec::with_capacity(reply.len() + 2);
                framed.extend_from_slice(&(reply.len() as u16).to_be_bytes());
                framed.extend_from_slice(&reply);
                if s.write_all(&framed).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Answers one message (`None`: no answer at all) and records what became of it.
    pub(crate) async fn answer_dns(
        self: &Arc<Self>,
        sandbox: &Arc<Sandbox>,
        bytes: &[u8],
    ) -> Option<Vec<u8>> {
        let start = Instant::now();
        let mut draft = Ctx::new(sandbox.clone(), EVENT_METHOD, start);
        let q = match read_query(bytes) {
            Ok(q) => q,
            Err(m) => {
                draft.event.rule = "malformed request".into();
                draft.event.error = Some(format!("DNS query: {}", m.error));
                self.record_dns_refusal(draft);
                return m.id.map(|id| error_response(id, m.error.rcode()));
            }
        };
        draft.event.host = q.name_text.clone();
        let (outcome, record) = self.decide_dns(sandbox, &q, &mut draft).await;
        if draft.event.decision == EventOutcome::Allow {
            if record {
                self.logging(draft);
            }
        } else if record && self.dns_cache.first_refusal(&sandbox.id, &q.name_text) {
            self.record_dns_refusal(draft);
        }
        Some(response(&q, &outcome))
    }

    /// `logging` for a refusal of the stub: the first under its registrable domain in a window
    /// is recorded at once, the rest are counted into the window's summary (see
    /// [`dns_log`](crate::dns_log)), which a timer records when the window ends.
    fn record_dns_refusal(self: &Arc<Self>, ctx: Ctx) {
        let mut overdue = Vec::new();
        let e = &ctx.event;
        let note = self.dns_cache.refusals.note(
            Instant::now(),
            &e.sandbox,
            &e.host,
            e.decision,
            &e.rule,
            &mut overdue,
        );
        for summary in overdue {
            self.events.record(summary);
        }
        match note {
            Note::Record => self.logging(ctx),
            Note::Counted { schedule: false, .. } => {}
            Note::Counted { schedule: true, at } => {
                let weak = Arc::downgrade(self);
                tokio::spawn(async move {
                    tokio::time::sleep_until(at).await;
                    if let Some(inner) = weak.upgrade() {
                        for summary in inner.dns_cache.refusals.due(Instant::now()) {
                            inner.events.record(summary);
                        }
                    }
                });
            }
        }
    }

    /// Stage `decide` (without a port) for one question, and the answer: an address of the
    /// sandbox's own ([`names`](crate::names)) for every host name no deny rule refuses.
    /// Returns the outcome and whether it is worth an event (refusals are; answers are not: the
    /// connection that follows is the event).
    async fn decide_dns(&self, sandbox: &Sandbox, q: &DnsQuery, d: &mut Ctx) -> (DnsReply, bool) {
        let refuse = |d: &mut Ctx, verb: EventOutcome, rule: String| {
            d.event.decision = verb;
            d.event.rule = rule;
            (DnsReply::NxDomain, true)
        };
        let name = match &q.host {
            Err(why) => return refuse(d, EventOutcome::Reject, format!("not a host name: {why}")),
            // A number is not a name to look up; its owner needs no DNS.
            Ok(Host::Ip(_)) => {
                return refuse(d, EventOutcome::Reject, "an address, not a name".into());
            }
            Ok(Host::Name(n)) => n.clone(),
        };
        let host = Host::Name(name.clone());
        let policy = d.policy.clone();
        d.event.rule = match policy.decide_name(&host) {
            Decision::Allow(rule) => format!("allow {rule}"),
            Decision::Deny(rule) => return refuse(d, EventOutcome::Deny, format!("deny {rule}")),
            Decision::Ask => match self.name_grant(sandbox, &host).await {
                Some(rule) => format!("allow {rule}"),
                None => {
                    "no rule allows it yet: a connection to it is decided when it is made".into()
                }
            },
        };
        d.event.decision = EventOutcome::Allow;
        if q.query.query_type() != RecordType::A {
            // Only IPv4 addresses are given out (AAAA and every other type: no data), so that
            // every connection to the name goes to an address the sandbox's capture takes.
            return (DnsReply::Addresses(Vec::new()), false);
        }
        match sandbox.names.address_for(&name) {
            Some(ip) => (DnsReply::Addresses(vec![IpAddr::V4(ip)]), false),
            None => {
                d.event.decision = EventOutcome::Reject;
                d.event.rule = format!(
                    "this sandbox looked up {} names already, the most the DNS stub gives \
                     addresses to",
                    crate::names::CAPACITY
                );
                (DnsReply::ServFail, true)
            }
        }
    }

    /// A grant that lets `host` resolve: one for a port a lookup is usually followed by.
    async fn name_grant(&self, sandbox: &Sandbox, host: &Host) -> Option<Arc<Rule>> {
        for port in GRANT_PORTS {
            let target = Target { host: host.clone(), port };
            if let Some(rule) = self.grant(sandbox, &target).await {
                return Some(rule);
            }
        }
        None
    }
}

/// Asks one DNS server over UDP for A and AAAA records, instead of the system resolver: for
/// tests and benchmarks that need the host to resolve names of their own without touching the
/// host's configuration (`SANDGATE_DNS_SERVER=127.0.0.1:PORT` for the daemon).
#[derive(Clone, Copy, Debug)]
pub struct UdpResolver {
    server: SocketAddr,
    timeout: Duration,
}

impl UdpResolver {
    /// Asks `server`, waiting up to two seconds for each answer.
    pub fn new(server: SocketAddr) -> UdpResolver {
        UdpResolver { server, timeout: Duration::from_secs(2) }
    }

    async fn ask(&self, name: &Name, qtype: RecordType, id: u16) -> io::Result<Message> {
        let bind: SocketAddr = if self.server.is_ipv4() {
            (std::net::Ipv4Addr::LOCALHOST, 0).into()
        } else {
            (std::net::Ipv6Addr::LOCALHOST, 0).into()
        };
        let sock = UdpSocket::bind(bind).await?;
        sock.connect(self.server).await?;
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name.clone(), qtype));
        let bytes = m.to_vec().map_err(io::Error::other)?;
        sock.send(&bytes).await?;
        let mut buf = vec![0u8; 4096];
        let deadline = Instant::now() + self.timeout;
        loop {
            let n = tokio::time::timeout_at(deadline, sock.recv(&mut buf))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer"))??;
            if let Ok(reply) = Message::from_vec(&buf[..n])
                && reply.metadata.id == id
                && reply.metadata.message_type == MessageType::Response
            {
                return Ok(reply);
            }
        }
    }
}

impl crate::Resolver for UdpResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> crate::BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            let qname = Name::from_ascii(format!("{}.", name.as_str()))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let id = (std::process::id() as u16) ^ (name.as_str().len() as u16);
            let (a, aaaa) = tokio::join!(
                self.ask(&qname, RecordType::A, id),
                self.ask(&qname, RecordType::AAAA, id.wrapping_add(1))
            );
            let mut out = Vec::new();
            for reply in [a?, aaaa?] {
                for r in &reply.answers {
                    match &r.data {
                        RData::A(A(v4)) => out.push(SocketAddr::new(IpAddr::V4(*v4), port)),
                        RData::AAAA(AAAA(v6)) => out.push(SocketAddr::new(IpAddr::V6(*v6), port)),
                        _ => {}
                    }
                }
            }
            if out.is_empty() {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no addresses"));
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` (written label by label, raw bytes allowed) of type `qtype`.
    pub(crate) fn query_bytes(labels: &[&[u8]], qtype: u16) -> Vec<u8> {
        let mut out = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in labels {
            out.push(l.len() as u8);
            out.extend_from_slice(l);
        }
        out.push(0);
        out.extend_from_slice(&qtype.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out
    }

    #[test]
    fn reads_a_standard_query() {
        let q = read_query(&query_bytes(&[b"Pkgs", b"Example", b"com"], 1)).unwrap();
        assert_eq!(q.id, 0x1234);
        assert!(q.recursion_desired);
        assert_eq!(q.host.unwrap().to_string(), "pkgs.example.com");
        assert_eq!(q.query.query_type(), RecordType::A);
    }

    #[test]
    fn names_that_are_not_host_names_are_refused_not_rewritten() {
        let rows: &[&[&[u8]]] = &[
            &[b"evil\0", b"allowed", b"com"],
            &[b"a.b", b"allowed", b"com"], // a dot inside a label
            &[b"_dmarc", b"allowed", b"com"],
            &[b"ev il", b"allowed", b"com"],
            &[b"\xc3\xa9t\xc3\xa9", b"allowed", b"com"],
        ];
        for labels in rows {
            let q = read_query(&query_bytes(labels, 1)).unwrap();
            assert!(q.host.is_err(), "{labels:?}: {:?}", q.host);
        }
        // The root and a bare address are not names to resolve either.
        assert!(read_query(&query_bytes(&[], 1)).unwrap().host.is_err());
        let ip = read_query(&query_bytes(&[b"127", b"0", b"0", b"1"], 1)).unwrap();
        assert!(matches!(ip.host, Ok(Host::Ip(_))));
        // Numeric forms are addresses too (normalised like every host), never names to look up.
        let hex = read_query(&query_bytes(&[b"0x7f", b"1"], 1)).unwrap();
        assert_eq!(hex.host.unwrap().to_string(), "127.0.0.1");
    }

    #[test]
    fn bad_messages_are_refused_without_a_panic() {
        let good = query_bytes(&[b"example", b"com"], 1);
        // A label loop: the name is a pointer to itself.
        let mut looped = good[..12].to_vec();
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        // A pointer beyond the end of the message.
        let mut beyond = good[..12].to_vec();
        beyond.extend_from_slice(&[0xc0, 0xff, 0, 1, 0, 1]);
        // A pointer forward (into the type field).
        let mut forward = good[..12].to_vec();
        forward.extend_from_slice(&[0xc0, 14, 0, 1, 0, 1]);
        // Two questions.
        let mut two = good.clone();
        two[5] = 2;
        two.extend_from_slice(&good[12..]);
        // Question count says one, none there.
        let none = good[..12].to_vec();
        // A response.
        let mut resp = good.clone();
        resp[2] |= 0x80;
        // NOTIFY.
        let mut notify = good.clone();
        notify[2] = 0x20;
        // Class CH (version.bind style).
        let mut chaos = good.clone();
        let n = chaos.len();
        chaos[n - 1] = 3;
        // Huge.
        let mut huge = good.clone();
        huge.resize(70_000, 0);
        // A label over 63 bytes (the length byte's top bits set: 0x40 is an extended label type).
        let mut long_label = good[..12].to_vec();
        long_label.push(0x40);
        long_label.extend_from_slice(&[b'a'; 64]);
        long_label.extend_from_slice(&[0, 0, 1, 0, 1]);
        let rows: &[(&str, &[u8], Option<ResponseCode>)] = &[
            ("empty", &[], None),
            ("short header", &[0x12, 0x34, 0x01], None),
            ("label loop", &looped, Some(ResponseCode::FormErr)),
            ("pointer beyond the end", &beyond, Some(ResponseCode::FormErr)),
            ("pointer forward", &forward, Some(ResponseCode::FormErr)),
            ("two questions", &two, Some(ResponseCode::FormErr)),
            ("missing question", &none, Some(ResponseCode::FormErr)),
            ("a response", &resp, None),
            ("notify", &notify, Some(ResponseCode::NotImp)),
            ("class CH", &chaos, Some(ResponseCode::Refused)),
            ("huge", &huge, Some(ResponseCode::FormErr)),
            ("long label", &long_label, Some(ResponseCode::FormErr)),
        ];
        for (what, bytes, rcode) in rows {
            let m = read_query(bytes).expect_err(what);
            assert_eq!(m.id.map(|_| m.error.rcode()), *rcode, "{what}: {m:?}");
            if let Some(id) = m.id {
                let reply = Message::from_vec(&error_response(id, m.error.rcode())).unwrap();
                assert_eq!(reply.metadata.id, 0x1234, "{what}");
                assert_eq!(reply.metadata.message_type, MessageType::Response, "{what}");
            }
        }
    }

    #[test]
    fn answers_carry_only_the_asked_type_and_echo_the_question() {
        let q = read_query(&query_bytes(&[b"example", b"com"], 28)).unwrap();
        let addrs: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let reply = Message::from_vec(&response(&q, &DnsReply::Addresses(addrs))).unwrap();
        assert_eq!(reply.metadata.id, 0x1234);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(reply.queries, vec![q.query.clone()]);
        assert_eq!(reply.answers.len(), 1);
        assert_eq!(reply.answers[0].data, RData::AAAA(AAAA("2001:db8::1".parse().unwrap())));
        let nx = Message::from_vec(&response(&q, &DnsReply::NxDomain)).unwrap();
        assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
        assert!(nx.answers.is_empty());
        // Many addresses: capped, the answer stays under 512 bytes.
        let many: Vec<IpAddr> = (0..100u16)
            .map(|i| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i)))
            .collect();
        let big = response(&q, &DnsReply::Addresses(many));
        assert!(big.len() < 512, "{}", big.len());
    }
}
