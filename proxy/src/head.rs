//! The first request head of a connection, parsed without allocating more than the head itself.
//!
//! The proxy reads this head itself (rather than handing the connection to hyper straight away)
//! so that a CONNECT tunnel keeps the raw client socket, which splice(2) needs; any other request
//! is replayed into hyper's HTTP/1.1 server.

use sandgate_config::{InvalidTarget, Target};

/// Largest request head accepted (request line + headers), in bytes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most headers accepted in one head.
const MAX_HEADERS: usize = 96;

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The method, as sent (`CONNECT`, `GET`, ...).
    pub method: String,
    /// The request target, as sent.
    pub target: String,
    /// The value of `Proxy-Authorization`, when present.
    pub proxy_authorization: Option<Vec<u8>>,
    /// Length of the head in bytes (the request body, if any, starts here).
    pub len: usize,
}

impl Head {
    /// Whether this is a CONNECT request.
    pub fn is_connect(&self) -> bool {
        self.method.eq_ignore_ascii_case("CONNECT")
    }
}

/// Why a head could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The head is larger than the limit.
    #[error("the request head exceeds {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Not HTTP/1.x syntax.
    #[error("malformed request head: {0}")]
    Malformed(String),
}

/// Parses the head at the start of `buf`: `Ok(None)` while it is incomplete.
pub fn parse_head(buf: &[u8], limit: usize) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > limit {
                return Err(HeadError::TooLarge { limit });
            }
            let (Some(method), Some(target)) = (req.method, req.path) else {
                return Err(HeadError::Malformed("missing method or target".into()));
            };
            let proxy_authorization = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))
                .map(|h| h.value.to_vec());
            Ok(Some(Head {
                method: method.to_owned(),
                target: target.to_owned(),
                proxy_authorization,
                len,
            }))
        }
        Ok(httparse::Status::Partial) if buf.len() >= limit => Err(HeadError::TooLarge { limit }),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

/// The target of a CONNECT request: `host:port`, port required.
pub fn connect_target(head: &Head) -> Result<Target, InvalidTarget> {
    Target::parse_authority(&head.target, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Option<Head>, HeadError> {
        parse_head(s, MAX_HEAD_BYTES)
    }

    #[test]
    fn parses_connect_heads() {
        let h = parse(b"CONNECT crates.io:443 HTTP/1.1\r\nHost: crates.io:443\r\nProxy-Authorization: Basic eDp5\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert!(h.is_connect());
        assert_eq!(h.target, "crates.io:443");
        assert_eq!(h.proxy_authorization.as_deref(), Some(&b"Basic eDp5"[..]));
        assert_eq!(h.len, 88);
        assert_eq!(connect_target(&h).unwrap().to_string(), "crates.io:443");
    }

    #[test]
    fn incomplete_heads_wait_and_oversized_heads_fail() {
        assert_eq!(parse(b"CONNECT a:1 HTTP/1.1\r\nHost: a"), Ok(None));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(100));
        assert_eq!(parse_head(big.as_bytes(), 64), Err(HeadError::TooLarge { limit: 64 }));
    }

    #[test]
    fn malformed_heads_and_targets_are_refused() {
        let heads: &[&[u8]] = &[
            b"CONNECT a\0b:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a b:443 HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"GET / HTTP/9.9\r\n\r\n",
        ];
        for h in heads {
            assert!(parse(h).is_err(), "{h:?} should be malformed");
        }
        let long = format!("CONNECT {}.com:443 HTTP/1.1\r\n\r\n", "a".repeat(260));
        let targets = [
            "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n",
            "CONNECT user@example.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT example.com HTTP/1.1\r\n\r\n",
            "CONNECT example.com:0 HTTP/1.1\r\n\r\n",
            &long,
        ];
        for t in targets {
            let h = parse(t.as_bytes()).unwrap().unwrap();
            assert!(connect_target(&h).is_err(), "{t:?} should be refused");
        }
    }
}
