//! An upstream (corporate) proxy: after sandgate's own decision, connections leave through the
//! upstream's CONNECT instead of directly, except for destinations matching a bypass pattern.
//!
//! Names sent upstream are not resolved here: the upstream resolves them (a corporate network
//! often cannot resolve outside names itself). The address guard therefore applies only to what
//! sandgate connects to directly; the upstream is trusted to be where the user said it is.

use std::fmt;
use std::time::Duration;

use sandgate_config::{DomainPattern, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest answer head accepted from the upstream.
const MAX_HEAD: usize = 16 * 1024;

/// Where and how to reach the upstream proxy.
#[derive(Clone)]
pub struct Upstream {
    /// `host:port` of the upstream proxy.
    pub addr: String,
    /// `user:password` for `Proxy-Authorization: Basic` (never printed).
    pub credentials: Option<String>,
    /// Destinations reached directly, not through the upstream.
    pub bypass: Vec<DomainPattern>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .field("credentials", &self.credentials.as_ref().map(|_| "<hidden>"))
            .field("bypass", &self.bypass.iter().map(ToString::to_string).collect::<Vec<_>>())
            .finish()
    }
}

impl Upstream {
    /// Whether `target` goes through the upstream (it matches no bypass pattern).
    pub fn applies_to(&self, target: &Target) -> bool {
        !self.bypass.iter().any(|p| p.matches(&target.host, target.port))
    }

    /// Opens a tunnel to `target` through the upstream. The answer head is read a byte at a
    /// time so that bytes the destination sends first (an ssh banner) stay in the socket.
    pub(crate) async fn connect(
        &self,
        target: &Target,
        timeout: Duration,
    ) -> Result<TcpStream, String> {
        let work = async {
            let mut s = TcpStream::connect(&self.addr)
                .await
                .map_err(|e| format!("upstream proxy {}: {e}", self.addr))?;
            let _ = s.set_nodelay(true);
            let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
            if let Some(c) = &self.credentials {
                req.push_str("Proxy-Authorization: Basic ");
                req.push_str(&base64(c.as_bytes()));
                req.push_str("\r\n");
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| format!("upstream proxy {}: {e}", self.addr))?;
            let mut head = Vec::with_capacity(256);
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if head.len() > MAX_HEAD {
                    return Err(format!("upstream proxy {}: answer head too large", self.addr));
                }
                match s.read(&mut byte).await {
                    Ok(1) => head.push(byte[0]),
                    Ok(_) => {
                        return Err(format!(
                            "upstream proxy {} closed without answering",
                            self.addr
                        ));
                    }
                    Err(e) => return Err(format!("upstream proxy {}: {e}", self.addr)),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let status = text.lines().next().unwrap_or("").trim().to_owned();
            if status.split_whitespace().nth(1) == Some("200") {
                Ok(s)
            } else {
                Err(format!("upstream proxy {} answered {status:?}", self.addr))
            }
        };
        tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
            Err(format!("upstream proxy {}: no answer within {}s", self.addr, timeout.as_secs()))
        })
    }
}

fn base64(input: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_printed_and_bypass_matches_patterns() {
        let u = Upstream {
            addr: "proxy.corp:3128".into(),
            credentials: Some("me:s3cret".into()),
            bypass: vec![
                DomainPattern::parse("*.corp.example", sandgate_config::PatternUse::Allow).unwrap(),
            ],
        };
        assert!(!format!("{u:?}").contains("s3cret"));
        assert!(!u.applies_to(&Target::parse("git.corp.example:22").unwrap()));
        assert!(u.applies_to(&Target::parse("crates.io:443").unwrap()));
        assert_eq!(base64(b"me:s3cret"), "bWU6czNjcmV0");
    }
}
