//! A test collector: an HTTP/1.1 server on 127.0.0.1 that takes OTLP exports (`POST /v1/logs`,
//! `/v1/metrics`), keeps every byte it received, and answers as the test scripts it (200, an
//! error status with or without `Retry-After`, or never). Decoding the bodies is the tests'
//! business, with the OpenTelemetry project's own types (`opentelemetry-proto`), so that this
//! crate stays free of them.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One export request as received.
#[derive(Clone, Debug)]
pub struct ReceivedExport {
    /// The request path (`/v1/logs`).
    pub path: String,
    /// The headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl ReceivedExport {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// How the collector answers a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectorReply {
    /// This status, empty body.
    Status(u16),
    /// This status with `Retry-After: SECONDS`.
    RetryAfter(u16, u32),
    /// No answer at all: the connection stays open and silent (a collector that hangs).
    Hang,
}

#[derive(Default)]
struct State {
    /// Replies for the next requests, in order; then [`State::otherwise`].
    script: VecDeque<CollectorReply>,
    otherwise: Option<CollectorReply>,
    raw: Vec<u8>,
    requests: usize,
    /// Connections left open by [`CollectorReply::Hang`].
    hung: Vec<TcpStream>,
}

/// The collector; it serves until the test process ends.
pub struct Collector {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    rx: Mutex<mpsc::Receiver<ReceivedExport>>,
}

impl Collector {
    /// A collector that answers 200 to everything.
    pub fn start() -> Collector {
        Collector::scripted(&[], CollectorReply::Status(200))
    }

    /// A collector that answers the first requests with `script`, the rest with `otherwise`.
    pub fn scripted(script: &[CollectorReply], otherwise: CollectorReply) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the test collector");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(Mutex::new(State {
            script: script.iter().copied().collect(),
            otherwise: Some(otherwise),
            ..State::default()
        }));
        let (tx, rx) = mpsc::channel();
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (st, tx) = (st.clone(), tx.clone());
                std::thread::spawn(move || serve(conn, &st, &tx));
            }
        });
        Collector { addr, state, rx: Mutex::new(rx) }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next export received, waiting up to `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<ReceivedExport> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).recv_timeout(timeout).ok()
    }

    /// Every byte received so far, requests' heads included.
    pub fn raw(&self) -> Vec<u8> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).raw.clone()
    }

    /// Requests received so far (answered or not).
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).requests
    }
}

/// An endpoint where nothing listens: connecting is refused at once.
pub fn refused_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    drop(l);
    format!("http://{addr}")
}

fn serve(conn: TcpStream, state: &Mutex<State>, tx: &mpsc::Sender<ReceivedExport>) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut r = BufReader::new(conn);
    loop {
        let mut head = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.extend_from_slice(line.as_bytes());
            if line == "\r\n" {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.split("\r\n");
        let path = lines.next().and_then(|l| l.split(' ').nth(1)).unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let reply = {
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            s.raw.extend_from_slice(&head);
            s.raw.extend_from_slice(&body);
            s.requests += 1;
            let otherwise = s.otherwise.unwrap_or(CollectorReply::Status(200));
            s.script.pop_front().unwrap_or(otherwise)
        };
        let _ = tx.send(ReceivedExport { path, headers, body });
        let (status, extra) = match reply {
            CollectorReply::Status(s) => (s, String::new()),
            CollectorReply::RetryAfter(s, secs) => (s, format!("Retry-After: {secs}\r\n")),
            CollectorReply::Hang => {
                if let Ok(c) = out.try_clone() {
                    state.lock().unwrap_or_else(|e| e.into_inner()).hung.push(c);
                }
                return;
            }
        };
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/x-protobuf\r\n{extra}Content-Length: 0\r\n\r\n"
        );
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}
