//! `sandgate connect HOST PORT`: standard input and output relayed to HOST:PORT through the
//! sandbox's proxy (HTTP CONNECT, or SOCKS5 for a `socks5h://` proxy URL), for use as an ssh
//! `ProxyCommand` where `nc` is not available or not allowed.
//!
//! The proxy decides as it decides any tunnel (deny, allow, grants, a person's answer, the
//! address guard); a refusal is printed with the rule that made it and the command exits 1.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandgate_config::{Host, Target};

use crate::UsageError;

/// Variables read for the proxy address, first set wins (what curl reads for an https URL,
/// then the generic ones).
const PROXY_ENV: &[&str] =
    &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Longest proxy response head read before giving up.
const MAX_HEAD: usize = 64 * 1024;

/// How a `connect` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relayed {
    /// The proxy opened the tunnel and the relay ran until both sides closed.
    Done,
    /// The proxy refused the destination.
    Refused {
        /// The destination as the proxy was asked (normalised host, port).
        target: String,
        /// Why, with the rule that made it.
        why: String,
    },
}

/// A proxy URL, parsed.
#[derive(Debug, PartialEq, Eq)]
struct ProxyUrl {
    socks: bool,
    /// `host:port` to dial.
    addr: String,
    /// `user:password`, when the URL carries them.
    userinfo: Option<(String, String)>,
}

fn parse_proxy_url(url: &str) -> Result<ProxyUrl, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let socks = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "socks5h" | "socks5" => true,
        other => return Err(format!("proxy scheme {other:?} is not supported (http, socks5h)")),
    };
    let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            (Some((percent_decode(user), percent_decode(pass))), h)
        }
        None => (None, rest),
    };
    let default_port = if socks { 1080 } else { 80 };
    let target = Target::parse_authority(hostport, Some(default_port))
        .map_err(|e| format!("proxy address {hostport:?}: {e}"))?;
    Ok(ProxyUrl { socks, addr: target.to_string(), userinfo })
}

fn hex(b: Option<&u8>) -> Option<u8> {
    (*b? as char).to_digit(16).map(|d| d as u8)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (hex(b.get(i + 1)), hex(b.get(i + 2)))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Relays standard input and output to `host`:`port` through the proxy at `proxy` (default: the
/// first of the proxy variables set); returns once the relay ended or the proxy refused.
pub fn run(host: &str, port: u16, proxy: Option<String>) -> anyhow::Result<Relayed> {
    // The same normalisation as the proxy's: a host with a space, CR or LF cannot smuggle a
    // header into the CONNECT request.
    let host = Host::parse(host).map_err(|e| UsageError(format!("host {host:?}: {e}")))?;
    if port == 0 {
        return Err(UsageError("port 0 is not a destination".into()).into());
    }
    let target = Target { host, port };
    let url = match proxy {
        Some(u) => u,
        None => PROXY_ENV
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
            .ok_or_else(|| {
                UsageError(
                    "no proxy: set HTTPS_PROXY (sandgate net/build set it) or pass --proxy".into(),
                )
            })?,
    };
    let proxy = parse_proxy_url(&url).map_err(UsageError)?;
    let mut stream = TcpStream::connect(&proxy.addr)
        .with_context(|| format!("cannot reach the proxy at {}", proxy.addr))?;
    let _ = stream.set_nodelay(true);
    // The handshake has a deadline; the relay afterwards does not (an ssh session may idle).
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let leftover = if proxy.socks {
        match socks_handshake(&mut stream, &proxy, &target)? {
            Ok(()) => Vec::new(),
            Err(why) => return Ok(Relayed::Refused { target: target.to_string(), why }),
        }
    } else {
        match http_connect(&mut stream, &proxy, &target)? {
            Ok(leftover) => leftover,
            Err(why) => return Ok(Relayed::Refused { target: target.to_string(), why }),
        }
    };
    stream.set_read_timeout(None)?;
    relay(stream, &leftover)?;
    Ok(Relayed::Done)
}

/// Sends CONNECT and reads the answer: `Ok(leftover bytes)` on 200, `Err(explanation)` else.
fn http_connect(
    stream: &mut TcpStream,
    proxy: &ProxyUrl,
    target: &Target,
) -> anyhow::Result<Result<Vec<u8>, String>> {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some((user, pass)) = &proxy.userinfo {
        req.push_str(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64_encode(format!("{user}:{pass}").as_bytes())
        ));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            bail!("the proxy's answer has no end of head within {MAX_HEAD} bytes");
        }
        let n = stream.read(&mut chunk).context("reading the proxy's answer")?;
        if n == 0 {
            bail!("the proxy closed the connection without answering");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status_line = head.lines().next().unwrap_or("").to_owned();
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    if code == "200" {
        return Ok(Ok(buf[head_end..].to_vec()));
    }
    // A refusal: the decision header names the rule, the body explains what to do.
    let decision = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case("x-sandgate-decision").then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    let mut body = buf[head_end..].to_vec();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.take(MAX_HEAD as u64).read_to_end(&mut body);
    let mut why = status_line;
    if !decision.is_empty() {
        why.push_str(&format!(" ({decision})"));
    }
    let body = String::from_utf8_lossy(&body);
    let body = body.trim();
    if !body.is_empty() {
        why.push('\n');
        why.push_str(body);
    }
    Ok(Err(why))
}

/// RFC 1928 CONNECT by name (socks5h), with RFC 1929 credentials when the URL has them.
fn socks_handshake(
    stream: &mut TcpStream,
    proxy: &ProxyUrl,
    target: &Target,
) -> anyhow::Result<Result<(), String>> {
    let method = if proxy.userinfo.is_some() { 0x02 } else { 0x00 };
    stream.write_all(&[5, 1, method])?;
    let mut two = [0u8; 2];
    stream.read_exact(&mut two).context("reading the SOCKS method selection")?;
    if two != [5, method] {
        return Ok(Err(format!("the SOCKS proxy accepts none of our methods ({two:?})")));
    }
    if let Some((user, pass)) = &proxy.userinfo {
        let (u, p) = (user.as_bytes(), pass.as_bytes());
        if u.len() > 255 || p.len() > 255 {
            bail!("SOCKS user name or password longer than 255 bytes");
        }
        let mut m = vec![1, u.len() as u8];
        m.extend_from_slice(u);
        m.push(p.len() as u8);
        m.extend_from_slice(p);
        stream.write_all(&m)?;
        stream.read_exact(&mut two).context("reading the SOCKS authentication answer")?;
        if two[1] != 0 {
            return Ok(Err("the SOCKS proxy refused the credentials".into()));
        }
    }
    let mut req = vec![5, 1, 0];
    match target.host {
        Host::Ip(std::net::IpAddr::V4(v4)) => {
            req.push(1);
            req.extend_from_slice(&v4.octets());
        }
        Host::Ip(std::net::IpAddr::V6(v6)) => {
            req.push(4);
            req.extend_from_slice(&v6.octets());
        }
        Host::Name(ref n) => {
            req.push(3);
            req.push(n.as_str().len() as u8);
            req.extend_from_slice(n.as_str().as_bytes());
        }
    }
    req.extend_from_slice(&target.port.to_be_bytes());
    stream.write_all(&req)?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).context("reading the SOCKS reply")?;
    if head[1] != 0 {
        let why = match head[1] {
            0x02 => "connection not allowed by ruleset",
            0x04 => "host unreachable",
            0x05 => "connection refused",
            0x07 => "command not supported",
            0x08 => "address type not supported",
            _ => "general failure",
        };
        return Ok(Err(format!(
            "SOCKS reply {:#04x}: {why} (`sandgate log` shows the rule)",
            head[1]
        )));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut n = [0u8; 1];
            stream.read_exact(&mut n)?;
            n[0] as usize + 2
        }
        t => bail!("SOCKS reply with address type {t:#04x}"),
    };
    let mut skip = vec![0u8; rest];
    stream.read_exact(&mut skip)?;
    Ok(Ok(()))
}

/// Copies stdin to the stream and the stream to stdout until the stream ends.
fn relay(stream: TcpStream, leftover: &[u8]) -> io::Result<()> {
    let mut up = stream.try_clone()?;
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let _ = io::copy(&mut stdin, &mut up);
        // End of input (ssh closed our stdin): pass the half-close on.
        let _ = up.shutdown(Shutdown::Write);
    });
    let mut stdout = io::stdout().lock();
    stdout.write_all(leftover)?;
    stdout.flush()?;
    let mut down = stream;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match down.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        stdout.write_all(&buf[..n])?;
        // ssh waits for each packet: no buffering on the way out.
        stdout.flush()?;
    }
    Ok(())
}

fn base64_encode(input: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls_parse() {
        let p = parse_proxy_url("http://127.0.0.1:3128").unwrap();
        assert_eq!(p, ProxyUrl { socks: false, addr: "127.0.0.1:3128".into(), userinfo: None });
        let p = parse_proxy_url("socks5h://sandbox:s%40t@127.0.0.1:3128/").unwrap();
        assert!(p.socks);
        assert_eq!(p.userinfo, Some(("sandbox".into(), "s@t".into())));
        assert_eq!(parse_proxy_url("127.0.0.1:8080").unwrap().addr, "127.0.0.1:8080");
        assert!(parse_proxy_url("ftp://x:1").is_err());
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64_encode(b"user:s3cret"), "dXNlcjpzM2NyZXQ=");
        assert_eq!(base64_encode(b"x:y"), "eDp5");
        assert_eq!(base64_encode(b"a"), "YQ==");
    }
}
