//! Reading the first bytes of a tunnel: is it TLS, and which server does its ClientHello name?
//!
//! # What a tunnel may open with
//!
//! A tunnel *speaks TLS* when its first byte is a TLS record type (`0x14..=0x18`) followed by a
//! version major of 3 (what every TLS server requires), or it starts like an SSLv2-format hello. Such a tunnel must open with exactly this, or it is refused:
//!
//! - handshake records only (`0x16`, version `3.0`–`3.4`, 1..=2^14 bytes each) until the
//!   ClientHello is complete — an alert, change_cipher_spec, application data or heartbeat record
//!   first is refused: servers skip some of those (rustls skips warning alerts) and a parser that
//!   skipped them differently would check one name while the server reads another;
//! - the first handshake message is a ClientHello, possibly split across records and reads, no
//!   larger than [`MAX_HELLO`] and no more than [`MAX_OPENING`] bytes on the wire, and nothing
//!   else in the record that ends it;
//! - a well-formed body (every length adds up, no trailing bytes, no extension twice), with at most
//!   one `server_name` extension holding exactly one `host_name` in normal form (see
//!   [`server_host`]);
//! - no Encrypted Client Hello (nor the ESNI draft): it hides the real name behind a public one.
//!
//! # A second ClientHello
//!
//! A TLS 1.3 server may answer the ClientHello with a HelloRetryRequest (a ServerHello with a
//! fixed random, RFC 8446 §4.1.3); the client then sends a second ClientHello, still in the clear,
//! and a server may pick its virtual host from that one. RFC 8446 §4.1.2 says it must name the
//! same server, but not every server checks, and a client can force the retry (a key share for a
//! group the server does not take) and send both hellos at once. So the tunnel is not spliced
//! until the server's first handshake message is seen ([`server_first`]); while it is awaited
//! the client's further bytes are held, and after a HelloRetryRequest they must be (one optional
//! change_cipher_spec, then) a second ClientHello under the same rules that names exactly the same
//! server ([`SecondHello`]). The server's flight is read rather than the client's guessed: after
//! a TLS 1.2 abbreviated handshake the client also sends change_cipher_spec then a handshake
//! record, but encrypted, which no parser may read as a hello.
//!
//! An SSLv2-format hello is refused outright (it cannot carry a server name; OpenSSL still accepts
//! it for TLS ≤ 1.2). Which ports must speak TLS, and what a hello without a name gets, is the
//! caller's policy ([`is_tls_port`], `ProxyShared::sni_filter`).
//!
//! # Why hand-written
//!
//! The security decision is the record-layer policy above, which no parser crate makes for us
//! (`tls-parser` parses records one at a time and leaves reassembly, ordering and strictness to
//! the caller, and pulls in `nom`). What is left is ~150 lines of length-prefixed reads with no
//! `unsafe`, no panics and no allocation beyond the reassembled message, fuzzed by
//! `proxy/fuzz/fuzz_targets/client_hello.rs` and a stable-Rust random harness
//! (`proxy/examples/sni_fuzz.rs`). It is incremental: bytes arriving one at a time are looked at
//! once each, so a slow client costs no more than a fast one.

use sandgate_config::{DomainName, Host};

/// First byte of a TLS handshake record.
pub const HANDSHAKE: u8 = 0x16;
const CHANGE_CIPHER_SPEC: u8 = 0x14;
const ALERT: u8 = 0x15;
const APPLICATION_DATA: u8 = 0x17;
const HEARTBEAT: u8 = 0x18;

/// Largest ClientHello accepted, in bytes (the protocol allows 16 MiB; real ones are < 4 KiB).
pub const MAX_HELLO: usize = 64 * 1024;

/// Most bytes read from the client before its ClientHello must be complete (record headers of a
/// hello split into many small records included).
pub const MAX_OPENING: usize = 2 * MAX_HELLO;

/// Largest plaintext record (RFC 8446 §5.1).
const MAX_RECORD: usize = 1 << 14;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
const EXT_ENCRYPTED_SERVER_NAME: u16 = 0xffce;

/// Implicit-TLS ports (IANA): a tunnel to one of these must open with an acceptable ClientHello.
const TLS_PORTS: [u16; 13] = [443, 465, 563, 636, 853, 989, 990, 992, 993, 994, 995, 5061, 8443];

/// Whether a tunnel to `port` must speak TLS from its first byte.
pub fn is_tls_port(port: u16) -> bool {
    TLS_PORTS.contains(&port)
}

/// What the bytes seen so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Not decided yet: more bytes are needed.
    NeedMore,
    /// The first bytes are not TLS (another protocol).
    NotTls,
    /// A complete, acceptable ClientHello.
    ClientHello {
        /// The `host_name` of the server_name extension, if it sent one (not yet normalised).
        server_name: Option<String>,
    },
}

/// What the bytes seen so far say, for callers that know the tunnel speaks TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// The ClientHello is not complete yet.
    NeedMore,
    /// A complete ClientHello, with its server name if it sent one.
    Complete {
        /// The first `host_name` of the server_name extension.
        server_name: Option<String>,
    },
}

/// Why the opening of a TLS tunnel was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadHello {
    /// The first bytes are not a TLS handshake record.
    #[error("not a TLS handshake record")]
    NotHandshake,
    /// A record of another type came before the ClientHello was complete.
    #[error("a TLS {0} record came before the ClientHello")]
    RecordBeforeHello(&'static str),
    /// A record type that TLS does not define.
    #[error("unknown TLS record type {0:#04x}")]
    UnknownRecordType(u8),
    /// A record version other than 3.0–3.4.
    #[error("unknown TLS record version {0}.{1}")]
    RecordVersion(u8, u8),
    /// A record length of 0 or over 2^14.
    #[error("TLS record length {0} (must be 1 to 16384)")]
    RecordLength(usize),
    /// An SSLv2-format hello (no extensions, so no server name).
    #[error("SSLv2-format ClientHello (it cannot name a server)")]
    Sslv2,
    /// The first handshake message is not a ClientHello.
    #[error("the first TLS handshake message is not a ClientHello (type {0})")]
    NotClientHello(u8),
    /// Larger than [`MAX_HELLO`], or still incomplete after [`MAX_OPENING`] bytes.
    #[error("the ClientHello is larger than {MAX_HELLO} bytes")]
    TooLarge,
    /// A length field points past the end of its container, or bytes are left over.
    #[error("malformed ClientHello ({0})")]
    Truncated(&'static str),
    /// An extension appears twice.
    #[error("extension {0:#06x} sent twice")]
    DuplicateExtension(u16),
    /// The server_name extension is not one `host_name` in normal form.
    #[error("invalid server_name extension: {0}")]
    BadServerName(&'static str),
    /// Encrypted Client Hello hides the real server name from the proxy.
    #[error("Encrypted Client Hello hides the server name; it is not accepted through the proxy")]
    Encrypted,
}

/// The random of a HelloRetryRequest: SHA-256 of "HelloRetryRequest" (RFC 8446 §4.1.3).
const HELLO_RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// What the server's first bytes say about a second ClientHello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerFirst {
    /// The first handshake message is not complete enough yet.
    NeedMore,
    /// A HelloRetryRequest: the client's next handshake message is a second ClientHello.
    HelloRetry,
    /// Anything else (a ServerHello, an alert, not TLS): no second hello can follow in the clear.
    Other,
}

/// Reads the server's first bytes (everything received so far) far enough to tell a
/// HelloRetryRequest: handshake records until the message type, version and random (38 bytes)
/// are there. Every record carries at least one byte, so this decides within 6 × 38 bytes.
pub fn server_first(wire: &[u8]) -> ServerFirst {
    const NEEDED: usize = 4 + 2 + 32;
    let mut msg = [0u8; NEEDED];
    let mut have = 0;
    let mut rest = wire;
    while have < NEEDED {
        if rest.is_empty() {
            return ServerFirst::NeedMore;
        }
        if rest[0] != HANDSHAKE || rest.get(1).is_some_and(|&v| v != 3) {
            return ServerFirst::Other;
        }
        if rest.len() < 5 {
            return ServerFirst::NeedMore;
        }
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        if len == 0 || len > MAX_RECORD {
            return ServerFirst::Other;
        }
        let payload = &rest[5..rest.len().min(5 + len)];
        let n = payload.len().min(NEEDED - have);
        msg[have..have + n].copy_from_slice(&payload[..n]);
        have += n;
        // A ServerHello is handshake type 2; anything else is decided at its first byte.
        if have > 0 && msg[0] != 0x02 {
            return ServerFirst::Other;
        }
        if payload.len() < len {
            break;
        }
        rest = &rest[5 + len..];
    }
    if have < NEEDED {
        ServerFirst::NeedMore
    } else if msg[6..] == HELLO_RETRY_RANDOM {
        ServerFirst::HelloRetry
    } else {
        ServerFirst::Other
    }
}

/// Reads what a client sends after a HelloRetryRequest: at most one change_cipher_spec record
/// (RFC 8446 Appendix D.4, exactly `14 03 03 00 01 01`), then a second ClientHello under the
/// rules of the first ([`OpeningParser`]). Like it, [`SecondHello::advance`] takes every byte
/// received since the first hello ended.
#[derive(Debug, Default)]
pub struct SecondHello {
    /// Bytes of the leading change_cipher_spec record, once seen (0 or 6).
    skip: usize,
    hello: OpeningParser,
}

impl SecondHello {
    /// A parser that has seen nothing after the first hello.
    pub fn new() -> SecondHello {
        SecondHello::default()
    }

    /// Looks at `wire`; `Ok(Some(name))` once the second hello is complete and acceptable (its
    /// server name, if any), `Ok(None)` while more bytes are needed.
    pub fn advance(&mut self, wire: &[u8]) -> Result<Option<Option<String>>, BadHello> {
        const CCS: [u8; 6] = [CHANGE_CIPHER_SPEC, 3, 3, 0, 1, 1];
        if self.skip == 0 && wire.first() == Some(&CHANGE_CIPHER_SPEC) {
            let n = wire.len().min(CCS.len());
            if wire[..n] != CCS[..n] {
                return Err(BadHello::RecordBeforeHello("change_cipher_spec"));
            }
            if n < CCS.len() {
                return Ok(None);
            }
            self.skip = CCS.len();
        }
        match self.hello.advance(&wire[self.skip..])? {
            Opening::NeedMore => Ok(None),
            Opening::NotTls => Err(BadHello::NotHandshake),
            Opening::ClientHello { server_name } => Ok(Some(server_name)),
        }
    }

    /// Wire bytes up to the end of the second hello's record.
    pub fn consumed(&self) -> usize {
        self.skip + self.hello.consumed()
    }
}

/// Reads the opening of a tunnel incrementally. Each call to [`OpeningParser::advance`] passes all
/// bytes received so far (a growing buffer); bytes already looked at are not looked at again.
#[derive(Debug, Default)]
pub struct OpeningParser {
    /// Wire offset of the next record header.
    next: usize,
    /// The handshake message reassembled from complete records.
    msg: Vec<u8>,
}

impl OpeningParser {
    /// A parser that has seen nothing.
    pub fn new() -> OpeningParser {
        OpeningParser::default()
    }

    /// Wire bytes up to the end of the record that completed the ClientHello (once it is).
    pub fn consumed(&self) -> usize {
        self.next
    }

    /// Looks at `wire` (everything the client sent so far, starting with what the last call saw).
    pub fn advance(&mut self, wire: &[u8]) -> Result<Opening, BadHello> {
        if self.next == 0 {
            match classify(wire)? {
                Some(true) => {}
                Some(false) => return Ok(Opening::NotTls),
                None => return Ok(Opening::NeedMore),
            }
        }
        loop {
            let rest = &wire[self.next..];
            let Some(len) = record_header(rest)? else {
                return need_more(wire.len());
            };
            let payload = &rest[5..];
            if payload.len() < len {
                // Refuse a wrong message type before waiting for the rest of the record.
                message_length(&self.msg, payload)?;
                return need_more(wire.len());
            }
            self.msg.extend_from_slice(&payload[..len]);
            self.next += 5 + len;
            if self.next > MAX_OPENING {
                return Err(BadHello::TooLarge);
            }
            if let Some(total) = message_length(&self.msg, &[])?
                && self.msg.len() >= total
            {
                if self.msg.len() > total {
                    // Servers read the next message from the same record; only a hello may come.
                    return Err(BadHello::Truncated("bytes after the ClientHello in its record"));
                }
                let server_name = parse_body(&self.msg[4..total])?;
                return Ok(Opening::ClientHello { server_name });
            }
        }
    }
}

fn need_more(seen: usize) -> Result<Opening, BadHello> {
    if seen > MAX_OPENING { Err(BadHello::TooLarge) } else { Ok(Opening::NeedMore) }
}

/// Whether the first bytes speak TLS: `Some(true)` yes, `Some(false)` no, `None` not known yet.
fn classify(wire: &[u8]) -> Result<Option<bool>, BadHello> {
    let Some(&first) = wire.first() else { return Ok(None) };
    if (CHANGE_CIPHER_SPEC..=HEARTBEAT).contains(&first) {
        // A record's version major is 3 in every TLS version; a TLS server refuses anything else
        // (rustls, OpenSSL), so other bytes are another protocol (a MongoDB length, say).
        match wire.get(1) {
            None => return Ok(None),
            Some(3) => {}
            Some(_) => return Ok(Some(false)),
        }
    }
    match first {
        HANDSHAKE => Ok(Some(true)),
        CHANGE_CIPHER_SPEC => Err(BadHello::RecordBeforeHello("change_cipher_spec")),
        ALERT => Err(BadHello::RecordBeforeHello("alert")),
        APPLICATION_DATA => Err(BadHello::RecordBeforeHello("application_data")),
        HEARTBEAT => Err(BadHello::RecordBeforeHello("heartbeat")),
        // SSLv2 record header: 2-byte length with the top bit set, then MSG-CLIENT-HELLO (1).
        b if b & 0x80 != 0 => match wire.get(2) {
            None => Ok(None),
            Some(1) => Err(BadHello::Sslv2),
            Some(_) => Ok(Some(false)),
        },
        _ => Ok(Some(false)),
    }
}

/// Checks a record header at the start of `rest`; returns its payload length once all 5 bytes are
/// there. Each byte is judged as soon as it arrives.
fn record_header(rest: &[u8]) -> Result<Option<usize>, BadHello> {
    if let Some(&kind) = rest.first() {
        match kind {
            HANDSHAKE => {}
            CHANGE_CIPHER_SPEC => return Err(BadHello::RecordBeforeHello("change_cipher_spec")),
            ALERT => return Err(BadHello::RecordBeforeHello("alert")),
            APPLICATION_DATA => return Err(BadHello::RecordBeforeHello("application_data")),
            HEARTBEAT => return Err(BadHello::RecordBeforeHello("heartbeat")),
            other => return Err(BadHello::UnknownRecordType(other)),
        }
    }
    if rest.len() >= 3 && (rest[1] != 3 || rest[2] > 4) {
        return Err(BadHello::RecordVersion(rest[1], rest[2]));
    } else if rest.len() == 2 && rest[1] != 3 {
        return Err(BadHello::RecordVersion(rest[1], 0));
    }
    if rest.len() < 5 {
        return Ok(None);
    }
    let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
    if len == 0 || len > MAX_RECORD {
        return Err(BadHello::RecordLength(len));
    }
    Ok(Some(len))
}

/// Checks the handshake message header (the first bytes of `msg` then `more`); returns the full
/// message length once its 4 header bytes are there.
fn message_length(msg: &[u8], more: &[u8]) -> Result<Option<usize>, BadHello> {
    let mut head = [0u8; 4];
    let mut n = 0;
    for &b in msg.iter().chain(more).take(4) {
        head[n] = b;
        n += 1;
    }
    if n == 0 {
        return Ok(None);
    }
    if head[0] != 0x01 {
        return Err(BadHello::NotClientHello(head[0]));
    }
    if n < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, head[1], head[2], head[3]]) as usize;
    if len + 4 > MAX_HELLO {
        return Err(BadHello::TooLarge);
    }
    Ok(Some(len + 4))
}

/// Parses the ClientHello at the start of `buf`, for callers that know the tunnel speaks TLS
/// (anything that is not TLS is [`BadHello::NotHandshake`]).
pub fn parse_client_hello(buf: &[u8]) -> Result<Hello, BadHello> {
    match OpeningParser::new().advance(buf)? {
        Opening::NeedMore => Ok(Hello::NeedMore),
        Opening::NotTls => Err(BadHello::NotHandshake),
        Opening::ClientHello { server_name } => Ok(Hello::Complete { server_name }),
    }
}

/// The server name of a ClientHello as a checked name: it must already be in the normal form
/// sandgate matches (lower case apart, no trailing dot, no IP literal, no numeric or Unicode
/// tricks), so the name the policy checks is byte for byte the name a server looks up — a server
/// that did not recognise an odd spelling would answer with its default site.
pub fn server_host(name: &str) -> Result<DomainName, BadHello> {
    match Host::parse(name) {
        Ok(Host::Name(n)) if n.as_str().eq_ignore_ascii_case(name) => Ok(n),
        Ok(Host::Name(_)) => Err(BadHello::BadServerName("not in normal form")),
        Ok(Host::Ip(_)) => Err(BadHello::BadServerName("an IP address (RFC 6066 forbids it)")),
        Err(_) => Err(BadHello::BadServerName("not a valid host name")),
    }
}

/// A cursor over a byte slice whose reads fail instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], BadHello> {
        if self.0.len() < n {
            return Err(BadHello::Truncated(what));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<usize, BadHello> {
        Ok(self.take(1, what)?[0] as usize)
    }

    fn u16(&mut self, what: &'static str) -> Result<usize, BadHello> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], BadHello> {
        let n = self.u8(what)?;
        self.take(n, what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], BadHello> {
        let n = self.u16(what)?;
        self.take(n, what)
    }

    fn end(&self, what: &'static str) -> Result<(), BadHello> {
        if self.0.is_empty() { Ok(()) } else { Err(BadHello::Truncated(what)) }
    }
}

fn parse_body(body: &[u8]) -> Result<Option<String>, BadHello> {
    let mut r = Reader(body);
    let version = r.take(2, "version")?;
    if version[0] != 3 {
        return Err(BadHello::Truncated("client version"));
    }
    r.take(32, "random")?;
    if r.vec8("session id")?.len() > 32 {
        return Err(BadHello::Truncated("session id longer than 32 bytes"));
    }
    let suites = r.vec16("cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(BadHello::Truncated("cipher suites"));
    }
    if r.vec8("compression methods")?.is_empty() {
        return Err(BadHello::Truncated("compression methods"));
    }
    if r.0.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut exts = Reader(r.vec16("extensions")?);
    r.end("bytes after the extensions")?;
    let mut server_name = None;
    let mut seen: Vec<u16> = Vec::new();
    while !exts.0.is_empty() {
        let kind = exts.u16("extension type")? as u16;
        let data = exts.vec16("extension data")?;
        if seen.contains(&kind) {
            return Err(BadHello::DuplicateExtension(kind));
        }
        seen.push(kind);
        match kind {
            EXT_SERVER_NAME => server_name = Some(parse_server_name(data)?),
            EXT_ENCRYPTED_CLIENT_HELLO | EXT_ENCRYPTED_SERVER_NAME => {
                return Err(BadHello::Encrypted);
            }
            _ => {}
        }
    }
    Ok(server_name)
}

/// Exactly one entry, of type `host_name`: OpenSSL refuses anything else, and a server that took
/// the first entry whatever its type would read another name than a parser that skipped it.
fn parse_server_name(data: &[u8]) -> Result<String, BadHello> {
    let mut r = Reader(data);
    let mut list = Reader(r.vec16("server name list")?);
    r.end("bytes after the server name list")?;
    if list.0.is_empty() {
        return Err(BadHello::BadServerName("empty list"));
    }
    if list.u8("server name type")? != 0 {
        return Err(BadHello::BadServerName("not a host_name"));
    }
    let name = list.vec16("server name")?;
    if !list.0.is_empty() {
        return Err(BadHello::BadServerName("more than one name"));
    }
    if name.is_empty() || name.len() > 255 || !name.iter().all(|b| b.is_ascii_graphic()) {
        return Err(BadHello::BadServerName("not printable ASCII"));
    }
    // Checked to be ASCII above, so this cannot fail.
    Ok(String::from_utf8_lossy(name).into_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a ClientHello handshake message with the given extensions.
    pub(crate) fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one cipher suite
        body.extend([1, 0]); // null compression
        let mut ext_bytes = Vec::new();
        for (kind, data) in exts {
            ext_bytes.extend(kind.to_be_bytes());
            ext_bytes.extend((data.len() as u16).to_be_bytes());
            ext_bytes.extend(data);
        }
        body.extend((ext_bytes.len() as u16).to_be_bytes());
        body.extend(ext_bytes);
        let mut msg = vec![0x01];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(body);
        msg
    }

    pub(crate) fn sni_entries(entries: &[(u8, &str)]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for (kind, name) in entries {
            list.push(*kind);
            list.extend((name.len() as u16).to_be_bytes());
            list.extend(name.as_bytes());
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend(list);
        (EXT_SERVER_NAME, data)
    }

    pub(crate) fn sni_ext(name: &str) -> (u16, Vec<u8>) {
        sni_entries(&[(0, name)])
    }

    /// Wraps a handshake message in records of at most `max` payload bytes.
    pub(crate) fn records(msg: &[u8], max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in msg.chunks(max) {
            out.extend([HANDSHAKE, 3, 1]);
            out.extend((chunk.len() as u16).to_be_bytes());
            out.extend(chunk);
        }
        out
    }

    fn name(s: &str) -> Result<Hello, BadHello> {
        Ok(Hello::Complete { server_name: Some(s.into()) })
    }

    fn opening(wire: &[u8]) -> Result<Opening, BadHello> {
        OpeningParser::new().advance(wire)
    }

    /// A hello of exactly [`MAX_HELLO`] bytes (a large padding extension), in records of the
    /// largest size, is read; one byte more is refused, however it arrives.
    #[test]
    fn a_hello_up_to_the_limit_is_read_and_one_byte_more_is_not() {
        let sized = |total: usize| {
            let without = hello(&[sni_ext("crates.io"), (0x0015, Vec::new())]).len();
            let msg = hello(&[sni_ext("crates.io"), (0x0015, vec![0; total - without])]);
            assert_eq!(msg.len(), total);
            msg
        };
        let largest = sized(MAX_HELLO);
        assert_eq!(MAX_HELLO, 64 * 1024);
        let wire = records(&largest, MAX_RECORD);
        assert_eq!(parse_client_hello(&wire), name("crates.io"));
        assert_eq!(
            opening(&wire),
            Ok(Opening::ClientHello { server_name: Some("crates.io".into()) })
        );
        let over = records(&sized(MAX_HELLO + 1), MAX_RECORD);
        assert_eq!(parse_client_hello(&over), Err(BadHello::TooLarge));
        assert_eq!(opening(&over), Err(BadHello::TooLarge));
    }

    /// The opening may take [`MAX_OPENING`] bytes on the wire (a hello in many small records),
    /// not one more: at the limit it is read, or waited for when incomplete.
    #[test]
    fn the_opening_may_take_exactly_its_limit_on_the_wire() {
        // `count` records for a hello of `total` bytes: its wire is `total + 5 * count` bytes.
        let spread = |total: usize, count: usize| {
            let without = hello(&[sni_ext("crates.io"), (0x0015, Vec::new())]).len();
            let msg = hello(&[sni_ext("crates.io"), (0x0015, vec![0; total - without])]);
            let (each, extra) = (msg.len() / count, msg.len() % count);
            let mut wire = Vec::new();
            let mut at = 0;
            for i in 0..count {
                let len = each + usize::from(i < extra);
                wire.extend([HANDSHAKE, 3, 1]);
                wire.extend((len as u16).to_be_bytes());
                wire.extend(&msg[at..at + len]);
                at += len;
            }
            wire
        };
        let at_limit = spread(MAX_HELLO - 4, (MAX_OPENING - (MAX_HELLO - 4)) / 5);
        assert_eq!(at_limit.len(), MAX_OPENING);
        let read = Ok(Opening::ClientHello { server_name: Some("crates.io".into()) });
        assert_eq!(opening(&at_limit), read);
        assert_eq!(opening(&at_limit[..MAX_OPENING - 1]), Ok(Opening::NeedMore));
        let over = spread(MAX_HELLO - 3, (MAX_OPENING - (MAX_HELLO - 4)) / 5);
        assert_eq!(over.len(), MAX_OPENING + 1);
        assert_eq!(opening(&over[..MAX_OPENING]), Ok(Opening::NeedMore));
        assert_eq!(opening(&over), Err(BadHello::TooLarge));
    }

    /// A record may carry up to 2^14 bytes and say version 3.0 to 3.4, from either side.
    #[test]
    fn record_limits_sit_at_their_boundaries() {
        assert_eq!(opening(&[0x16, 3, 4, 0x40, 0]), Ok(Opening::NeedMore));
        assert_eq!(opening(&[0x16, 3, 5]), Err(BadHello::RecordVersion(3, 5)));
        assert_eq!(opening(&[0x16, 3, 1, 0x40, 1]), Err(BadHello::RecordLength(16385)));
        let mut hrr = server_hello(HELLO_RETRY_RANDOM);
        hrr.resize(MAX_RECORD, 0);
        let mut wire = vec![HANDSHAKE, 3, 3, 0x40, 0];
        wire.extend(&hrr);
        assert_eq!(server_first(&wire), ServerFirst::HelloRetry);
        wire[4] = 1; // 16385
        assert_eq!(server_first(&wire), ServerFirst::Other);
    }

    /// A first byte that starts no TLS or SSLv2 record is another protocol at once: the tunnel
    /// need not wait for a second byte.
    #[test]
    fn another_protocol_is_told_by_its_first_byte() {
        for first in [b'G', b'S', 0, 0x7f] {
            assert_eq!(opening(&[first]), Ok(Opening::NotTls), "{first:#x}");
            assert_eq!(opening(&[first, 0, 1]), Ok(Opening::NotTls), "{first:#x}");
        }
    }

    /// The fields of a hello at and past their limits: a session id of 32 bytes, an even,
    /// non-empty list of cipher suites, nothing after the extensions or the name list, a name
    /// of 1 to 255 bytes.
    #[test]
    fn hello_fields_at_their_limits() {
        // A hello whose body is built by hand: session id, suites, extensions, trailing bytes.
        let custom = |session: usize, suites: &[u8], exts: &[u8], trailing: &[u8]| {
            let mut body = vec![0x03, 0x03];
            body.extend([7u8; 32]);
            body.push(session as u8);
            body.extend(vec![1; session]);
            body.extend((suites.len() as u16).to_be_bytes());
            body.extend(suites);
            body.extend([1, 0]);
            body.extend((exts.len() as u16).to_be_bytes());
            body.extend(exts);
            body.extend(trailing);
            let mut msg = vec![0x01];
            msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
            msg.extend(body);
            parse_client_hello(&records(&msg, 16384))
        };
        let ext = |(kind, data): (u16, Vec<u8>)| {
            [&kind.to_be_bytes()[..], &(data.len() as u16).to_be_bytes(), &data].concat()
        };
        let sni = ext(sni_ext("crates.io"));
        let suites = [0x13, 0x01];
        assert_eq!(custom(32, &suites, &sni, &[]), name("crates.io"));
        let long_session = Err(BadHello::Truncated("session id longer than 32 bytes"));
        assert_eq!(custom(33, &suites, &sni, &[]), long_session);
        assert_eq!(custom(0, &[], &sni, &[]), Err(BadHello::Truncated("cipher suites")));
        assert_eq!(custom(0, &[0x13], &sni, &[]), Err(BadHello::Truncated("cipher suites")));
        let after = Err(BadHello::Truncated("bytes after the extensions"));
        assert_eq!(custom(0, &suites, &sni, &[0]), after);
        // The server name extension with a byte after its list.
        let (kind, mut data) = sni_ext("crates.io");
        data.push(0);
        let after_list = Err(BadHello::Truncated("bytes after the server name list"));
        assert_eq!(custom(0, &suites, &ext((kind, data)), &[]), after_list);
        let longest = "a".repeat(255);
        assert_eq!(custom(0, &suites, &ext(sni_ext(&longest)), &[]), name(&longest));
        let not_printable = Err(BadHello::BadServerName("not printable ASCII"));
        assert_eq!(custom(0, &suites, &ext(sni_ext(&"a".repeat(256))), &[]), not_printable);
        assert_eq!(custom(0, &suites, &ext(sni_ext("")), &[]), not_printable);
    }

    /// The implicit-TLS ports must open with a hello; the others may speak anything.
    #[test]
    fn tls_ports_are_the_implicit_tls_ones() {
        for port in [443, 465, 563, 636, 853, 989, 990, 992, 993, 994, 995, 5061, 8443] {
            assert!(is_tls_port(port), "{port}");
        }
        for port in [0, 22, 25, 80, 444, 587, 8080, 8444, 65535] {
            assert!(!is_tls_port(port), "{port}");
        }
    }

    #[test]
    fn reads_the_server_name() {
        let msg = hello(&[(0x000a, vec![0, 2, 0, 29]), sni_ext("crates.io")]);
        let wire = records(&msg, 16384);
        assert_eq!(parse_client_hello(&wire), name("crates.io"));
        // Split over several records, and over records of one byte.
        assert_eq!(parse_client_hello(&records(&msg, 7)), name("crates.io"));
        assert_eq!(parse_client_hello(&records(&msg, 1)), name("crates.io"));
        // Every prefix asks for more; none is an error.
        for n in 0..wire.len() {
            assert_eq!(parse_client_hello(&wire[..n]), Ok(Hello::NeedMore), "prefix {n}");
        }
        // Data after the hello's record is not looked at.
        let mut more = wire.clone();
        more.extend([0x17, 3, 3, 0, 1, 0]);
        assert_eq!(parse_client_hello(&more), name("crates.io"));
    }

    #[test]
    fn bytes_fed_one_at_a_time_give_the_same_answer() {
        let msg = hello(&[sni_ext("crates.io")]);
        for wire in [records(&msg, 16384), records(&msg, 3)] {
            let mut p = OpeningParser::new();
            let mut last = Ok(Opening::NeedMore);
            for n in 0..=wire.len() {
                last = p.advance(&wire[..n]);
                if n < wire.len() {
                    assert_eq!(last, Ok(Opening::NeedMore), "prefix {n}");
                }
            }
            assert_eq!(last, Ok(Opening::ClientHello { server_name: Some("crates.io".into()) }));
        }
    }

    #[test]
    fn a_hello_without_sni_has_no_name() {
        let msg = hello(&[(0x000a, vec![0, 2, 0, 29])]);
        assert_eq!(
            parse_client_hello(&records(&msg, 16384)),
            Ok(Hello::Complete { server_name: None })
        );
    }

    #[test]
    fn other_protocols_are_not_tls() {
        let rows: [&[u8]; 7] = [
            b"GET / HTTP/1.1\r\n",
            b"PRI * HTTP/2.0\r\n",
            b"SSH-2.0-x\r\n",
            &[0, 0, 0, 8, 4, 0xd2], // PostgreSQL SSLRequest-like length prefix
            &[0x16, 0x01, 0, 0, 0xdd], // a MongoDB message of 278 bytes (little-endian length)
            &[0x15, 0x02, 0x03],    // record-like, but no TLS version
            &[0x90, 0, 0],          // high bit set, not an SSLv2 hello
        ];
        for wire in rows {
            assert_eq!(opening(wire), Ok(Opening::NotTls), "{wire:?}");
        }
        assert_eq!(opening(&[0x90]), Ok(Opening::NeedMore));
        assert_eq!(opening(&[0x15]), Ok(Opening::NeedMore));
    }

    #[test]
    fn refuses_what_does_not_add_up() {
        let good = hello(&[sni_ext("a.com")]);
        let two = {
            let (k, d) = sni_ext("a.com");
            hello(&[(k, d.clone()), (k, d)])
        };
        let ech = hello(&[sni_ext("public.example"), (EXT_ENCRYPTED_CLIENT_HELLO, vec![0; 8])]);
        let esni = hello(&[sni_ext("public.example"), (EXT_ENCRYPTED_SERVER_NAME, vec![0; 8])]);
        let dup = hello(&[(10, vec![0, 2, 0, 29]), sni_ext("a.com"), (10, vec![0, 2, 0, 29])]);
        let mut truncated = hello(&[sni_ext("a.com")]);
        truncated[3] -= 4; // message length shorter than its extensions claim
        let mut extra = good.clone(); // a second message in the hello's record
        extra.extend([0x01, 0, 0, 0]);
        let alert = [0x15, 3, 3, 0, 2, 1, 100];
        let ccs = [0x14, 3, 3, 0, 1, 1];
        let then = |first: &[u8], msg: &[u8]| [first, &records(msg, 16384)].concat();
        let rows: Vec<(Vec<u8>, BadHello)> = vec![
            (then(&alert, &good), BadHello::RecordBeforeHello("alert")),
            (then(&ccs, &good), BadHello::RecordBeforeHello("change_cipher_spec")),
            (vec![0x17, 3, 3, 0, 1, 0], BadHello::RecordBeforeHello("application_data")),
            (vec![0x18, 3, 3, 0, 1, 0], BadHello::RecordBeforeHello("heartbeat")),
            // An alert between two records of one split hello.
            (
                [&records(&good[..10], 16384)[..], &alert, &records(&good[10..], 16384)].concat(),
                BadHello::RecordBeforeHello("alert"),
            ),
            (
                [&records(&good[..10], 16384)[..], &[0x19]].concat(),
                BadHello::UnknownRecordType(0x19),
            ),
            (vec![0x16, 3, 9], BadHello::RecordVersion(3, 9)),
            // A later record's version is checked too.
            (
                [&records(&good[..10], 16384)[..], &[0x16, 2, 0]].concat(),
                BadHello::RecordVersion(2, 0),
            ),
            (vec![0x16, 3, 1, 0, 0], BadHello::RecordLength(0)),
            (vec![0x16, 3, 1, 0x40, 1], BadHello::RecordLength(16385)),
            (vec![0x80, 0x2e, 0x01, 0x03, 0x01], BadHello::Sslv2),
            (vec![0x16, 3, 1, 0, 4, 2, 0, 0, 0], BadHello::NotClientHello(2)),
            (vec![0x16, 3, 1, 0, 40, 2], BadHello::NotClientHello(2)),
            (records(&two, 16384), BadHello::DuplicateExtension(0)),
            (records(&dup, 16384), BadHello::DuplicateExtension(10)),
            (records(&ech, 16384), BadHello::Encrypted),
            (records(&esni, 16384), BadHello::Encrypted),
            (
                records(&extra, 16384),
                BadHello::Truncated("bytes after the ClientHello in its record"),
            ),
            (vec![0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff], BadHello::TooLarge),
            (
                records(&hello(&[sni_entries(&[(0, "a.com"), (0, "b.com")])]), 16384),
                BadHello::BadServerName("more than one name"),
            ),
            (
                records(&hello(&[sni_entries(&[(1, "b.com"), (0, "a.com")])]), 16384),
                BadHello::BadServerName("not a host_name"),
            ),
            (records(&hello(&[sni_entries(&[])]), 16384), BadHello::BadServerName("empty list")),
            (
                records(&hello(&[sni_ext("a\u{7f}b")]), 16384),
                BadHello::BadServerName("not printable ASCII"),
            ),
        ];
        for (wire, want) in rows {
            assert_eq!(opening(&wire), Err(want), "{wire:?}");
        }
        assert!(parse_client_hello(&records(&truncated, 16384)).is_err());
        // A hello that never ends within the bound.
        let mut endless = vec![0x16, 3, 1, 0, 4, 1, 0, 0xff, 0xf0];
        while endless.len() <= MAX_OPENING {
            endless.extend([0x16, 3, 1, 0, 1, 0]);
        }
        assert_eq!(opening(&endless), Err(BadHello::TooLarge));
    }

    /// A ServerHello message with this random.
    pub(crate) fn server_hello(random: [u8; 32]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend(random);
        body.extend([0, 0x13, 0x01, 0]); // empty session id, suite, null compression
        body.extend([0, 6, 0, 0x2b, 0, 2, 3, 4]); // supported_versions: TLS 1.3
        let mut msg = vec![0x02];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(body);
        msg
    }

    #[test]
    fn tells_a_hello_retry_request_from_the_servers_first_bytes() {
        let hrr = server_hello(HELLO_RETRY_RANDOM);
        let plain = server_hello([9; 32]);
        for max in [16384, 5, 1] {
            let wire = records(&hrr, max);
            assert_eq!(server_first(&wire), ServerFirst::HelloRetry, "max {max}");
            // Prefixes: undecided until the random is complete (the first byte of a record
            // header already says "handshake", so nothing decides earlier).
            for n in 0..wire.len() {
                let got = server_first(&wire[..n]);
                assert!(got != ServerFirst::Other, "prefix {n} of max {max}: {got:?}");
            }
            assert_eq!(server_first(&records(&plain, max)), ServerFirst::Other, "max {max}");
        }
        let rows: [&[u8]; 6] = [
            &[0x15, 3, 3, 0, 2, 2, 40],         // an alert
            &[0x17, 3, 3, 0, 1, 0],             // application data
            b"SSH-2.0-x\r\n",                   // not TLS
            &[0x16, 3, 3, 0, 4, 0x0b, 0, 0, 0], // a Certificate first
            &[0x16, 3, 3, 0, 0],                // an empty record
            &[0x16, 2, 0],                      // not a TLS version
        ];
        for wire in rows {
            assert_eq!(server_first(wire), ServerFirst::Other, "{wire:?}");
        }
        // A record of another type in the middle of the ServerHello.
        let split = [&records(&hrr[..10], 16384)[..], &[0x15, 3, 3, 0, 2, 1, 0]].concat();
        assert_eq!(server_first(&split), ServerFirst::Other);
        assert_eq!(server_first(&[]), ServerFirst::NeedMore);
    }

    #[test]
    fn reads_a_second_hello_after_one_change_cipher_spec() {
        let ccs = [0x14, 3, 3, 0, 1, 1];
        let again = records(&hello(&[sni_ext("crates.io")]), 16384);
        let other = records(&hello(&[sni_ext("evil.example")]), 16384);
        let unnamed = records(&hello(&[]), 16384);
        let run = |wire: &[u8]| {
            let mut p = SecondHello::new();
            let mut last = Ok(None);
            for n in 0..=wire.len() {
                last = p.advance(&wire[..n]);
                if last != Ok(None) {
                    break;
                }
            }
            last
        };
        let named = |n: &str| Ok(Some(Some(n.to_owned())));
        assert_eq!(run(&again), named("crates.io"));
        assert_eq!(run(&[&ccs[..], &again].concat()), named("crates.io"));
        assert_eq!(run(&[&ccs[..], &other].concat()), named("evil.example"));
        assert_eq!(run(&unnamed), Ok(Some(None)));
        let mut p = SecondHello::new();
        let wire = [&ccs[..], &again, &[0x17, 3, 3, 0, 1, 0]].concat();
        assert_eq!(p.advance(&wire), named("crates.io"));
        assert_eq!(p.consumed(), ccs.len() + again.len());
        let rows: Vec<(Vec<u8>, BadHello)> = vec![
            ([&ccs[..], &ccs].concat(), BadHello::RecordBeforeHello("change_cipher_spec")),
            (vec![0x14, 3, 3, 0, 1, 2], BadHello::RecordBeforeHello("change_cipher_spec")),
            (vec![0x14, 3, 3, 0, 2, 1, 1], BadHello::RecordBeforeHello("change_cipher_spec")),
            (vec![0x17, 3, 3, 0, 1, 0], BadHello::RecordBeforeHello("application_data")),
            (vec![0x16, 3, 3, 0, 4, 0x10, 0, 0, 0], BadHello::NotClientHello(0x10)),
            (b"GET / HTTP/1.1\r\n".to_vec(), BadHello::NotHandshake),
            (
                records(&hello(&[sni_ext("a.com"), (EXT_ENCRYPTED_CLIENT_HELLO, vec![0; 4])]), 99),
                BadHello::Encrypted,
            ),
        ];
        for (wire, want) in rows {
            assert_eq!(run(&wire), Err(want), "{wire:?}");
        }
    }

    #[test]
    fn server_names_must_be_in_normal_form() {
        assert_eq!(server_host("crates.io").unwrap().as_str(), "crates.io");
        assert_eq!(server_host("Crates.IO").unwrap().as_str(), "crates.io");
        for bad in ["crates.io.", "127.0.0.1", "0x7f.1", "[::1]", "a..b", "-a.com", "a_b.com%"] {
            assert!(server_host(bad).is_err(), "{bad}");
        }
    }
}
