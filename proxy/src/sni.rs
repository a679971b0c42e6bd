//! Reading the server name (SNI) out of a TLS ClientHello without terminating TLS.
//!
//! The ClientHello may arrive in pieces and may span several TLS records; [`parse_client_hello`]
//! says whether it needs more bytes. Any structure that does not add up is an error: a tunnel
//! whose first bytes claim to be TLS but cannot be read is refused, never waved through.

/// First byte of a TLS handshake record.
pub const HANDSHAKE: u8 = 0x16;

/// Largest ClientHello accepted, in bytes (the protocol allows 16 MiB; real ones are < 4 KiB).
pub const MAX_HELLO: usize = 64 * 1024;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;

/// What the bytes seen so far say.
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

/// Why a ClientHello was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadHello {
    /// The first record is not a handshake record.
    #[error("not a TLS handshake record")]
    NotHandshake,
    /// The first handshake message is not a ClientHello.
    #[error("the first TLS handshake message is not a ClientHello")]
    NotClientHello,
    /// Larger than [`MAX_HELLO`].
    #[error("the ClientHello is larger than {MAX_HELLO} bytes")]
    TooLarge,
    /// A length field points past the end of its container.
    #[error("truncated or inconsistent ClientHello ({0})")]
    Truncated(&'static str),
    /// Two server_name extensions, or a name that is not valid text.
    #[error("invalid server_name extension: {0}")]
    BadServerName(&'static str),
    /// Encrypted Client Hello hides the real server name from the proxy.
    #[error("Encrypted Client Hello hides the server name; it is not accepted through the proxy")]
    Encrypted,
}

/// Parses the ClientHello at the start of `buf` (the first bytes the client sent in a tunnel).
pub fn parse_client_hello(buf: &[u8]) -> Result<Hello, BadHello> {
    // Reassemble the handshake message from the payloads of consecutive handshake records.
    let mut msg: Vec<u8> = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            return Ok(Hello::NeedMore);
        }
        if rest[0] != HANDSHAKE {
            return Err(BadHello::NotHandshake);
        }
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        if len == 0 || len > (1 << 14) + 2048 {
            return Err(BadHello::Truncated("record length"));
        }
        if rest.len() < 5 + len {
            // Before waiting for the rest of this record, refuse what is already wrong.
            msg.extend_from_slice(&rest[5..]);
            check_message_header(&msg)?;
            return Ok(Hello::NeedMore);
        }
        msg.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if let Some(total) = check_message_header(&msg)?
            && msg.len() >= total
        {
            let server_name = parse_body(&msg[4..total])?;
            return Ok(Hello::Complete { server_name });
        }
    }
}

/// Checks the handshake message header once 4 bytes are there; returns the full message length.
fn check_message_header(msg: &[u8]) -> Result<Option<usize>, BadHello> {
    if msg.is_empty() {
        return Ok(None);
    }
    if msg[0] != 0x01 {
        return Err(BadHello::NotClientHello);
    }
    if msg.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, msg[1], msg[2], msg[3]]) as usize;
    if len + 4 > MAX_HELLO {
        return Err(BadHello::TooLarge);
    }
    Ok(Some(len + 4))
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
}

fn parse_body(body: &[u8]) -> Result<Option<String>, BadHello> {
    let mut r = Reader(body);
    r.take(2, "version")?;
    r.take(32, "random")?;
    r.vec8("session id")?;
    r.vec16("cipher suites")?;
    r.vec8("compression methods")?;
    if r.0.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut exts = Reader(r.vec16("extensions")?);
    let mut server_name = None;
    let mut seen_sni = false;
    while !exts.0.is_empty() {
        let kind = exts.u16("extension type")? as u16;
        let data = exts.vec16("extension data")?;
        match kind {
            EXT_SERVER_NAME => {
                if seen_sni {
                    return Err(BadHello::BadServerName("sent twice"));
                }
                seen_sni = true;
                server_name = parse_server_name(data)?;
            }
            EXT_ENCRYPTED_CLIENT_HELLO => return Err(BadHello::Encrypted),
            _ => {}
        }
    }
    Ok(server_name)
}

fn parse_server_name(data: &[u8]) -> Result<Option<String>, BadHello> {
    let mut r = Reader(data);
    let mut list = Reader(r.vec16("server name list")?);
    let mut found = None;
    while !list.0.is_empty() {
        let kind = list.u8("server name type")?;
        let name = list.vec16("server name")?;
        if kind == 0 {
            if found.is_some() {
                return Err(BadHello::BadServerName("two host names"));
            }
            if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
                return Err(BadHello::BadServerName("not printable ASCII"));
            }
            // Checked to be ASCII above, so this cannot fail.
            found = Some(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(found)
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

    pub(crate) fn sni_ext(name: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![0u8];
        entry.extend((name.len() as u16).to_be_bytes());
        entry.extend(name.as_bytes());
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend(entry);
        (EXT_SERVER_NAME, data)
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

    #[test]
    fn reads_the_server_name() {
        let msg = hello(&[(0x000a, vec![0, 2, 0, 29]), sni_ext("crates.io")]);
        let wire = records(&msg, 16384);
        assert_eq!(parse_client_hello(&wire), name("crates.io"));
        // Split over several records.
        assert_eq!(parse_client_hello(&records(&msg, 7)), name("crates.io"));
        // Every prefix asks for more; none is an error.
        for n in 0..wire.len() {
            assert_eq!(parse_client_hello(&wire[..n]), Ok(Hello::NeedMore), "prefix {n}");
        }
        // Data after the hello is ignored.
        let mut more = wire.clone();
        more.extend([0x17, 3, 3, 0, 1, 0]);
        assert_eq!(parse_client_hello(&more), name("crates.io"));
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
    fn refuses_what_does_not_add_up() {
        let two = {
            let (k, d) = sni_ext("a.com");
            hello(&[(k, d.clone()), (k, d)])
        };
        let ech = hello(&[sni_ext("public.example"), (EXT_ENCRYPTED_CLIENT_HELLO, vec![0; 8])]);
        let mut truncated = hello(&[sni_ext("a.com")]);
        truncated[3] -= 4; // message length shorter than its extensions claim
        let rows: Vec<(Vec<u8>, BadHello)> = vec![
            (b"GET / HTTP/1.1\r\n".to_vec(), BadHello::NotHandshake),
            (vec![0x16, 3, 1, 0, 4, 2, 0, 0, 0], BadHello::NotClientHello),
            (records(&two, 16384), BadHello::BadServerName("sent twice")),
            (records(&ech, 16384), BadHello::Encrypted),
            (vec![0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff], BadHello::TooLarge),
            (vec![0x16, 3, 1, 0, 0], BadHello::Truncated("record length")),
        ];
        for (wire, want) in rows {
            assert_eq!(parse_client_hello(&wire), Err(want), "{wire:?}");
        }
        assert!(parse_client_hello(&records(&truncated, 16384)).is_err());
        let bad_name = hello(&[sni_ext("a\u{7f}b")]);
        assert!(parse_client_hello(&records(&bad_name, 16384)).is_err());
    }
}
