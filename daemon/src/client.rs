//! The daemon's client side: connect (starting a daemon when none answers), send requests, read
//! replies and events. Synchronous: launchers and CLI commands are plain threads.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::Paths;
use crate::protocol::{Envelope, Event, PROTOCOL_VERSION, Reply, Request};

/// An error the daemon replied with.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DaemonError {
    /// `bad_request`, `not_found`, `conflict`, `store`, `denied`, `internal`.
    pub code: String,
    /// What happened and what to do.
    pub message: String,
}

/// What arrives on a connection.
#[derive(Debug)]
pub enum Incoming {
    /// An event line.
    Event(Box<Event>),
    /// The connection closed.
    Closed,
}

/// A connection to the daemon.
pub struct Client {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    events: VecDeque<Event>,
}

// Launchers (Linux only, so far) use the descriptor and raw-line calls.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Client {
    /// Connects to a running daemon.
    pub fn connect(paths: &Paths) -> std::io::Result<Client> {
        let stream = UnixStream::connect(&paths.socket)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Client { stream, reader, next_id: 1, events: VecDeque::new() })
    }

    /// Sets (or clears) the read timeout of the connection: a read that times out is an error
    /// for which [`timed_out`] is true.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    /// Connects, starting a daemon first when none answers (one at a time: a lock file keeps two
    /// launchers from starting two daemons).
    pub fn connect_or_start(paths: &Paths) -> anyhow::Result<Client> {
        if let Ok(c) = Client::connect(paths) {
            return Ok(c);
        }
        start_daemon(paths)?;
        Client::connect(paths).with_context(|| {
            format!("the daemon started but {} does not answer", paths.socket.display())
        })
    }

    /// A clone of the socket, for writing from another thread.
    pub fn try_clone_stream(&self) -> std::io::Result<UnixStream> {
        self.stream.try_clone()
    }

    /// Sends a request (with descriptors) and waits for its reply; events that arrive meanwhile
    /// are kept for [`next`](Self::next).
    pub fn request_with_fds(&mut self, request: Request, fds: &[RawFd]) -> anyhow::Result<Value> {
        let id = self.send_with_fds(request, fds)?;
        self.reply(id)
    }

    /// Sends a request (with descriptors) without waiting: its reply is read by
    /// [`reply`](Self::reply) with the id returned here.
    pub fn send_with_fds(&mut self, request: Request, fds: &[RawFd]) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_string(&Envelope { id: Some(id), request })?;
        line.push('\n');
        sandgate_sandbox::fdpass::send_with_fds(&self.stream, line.as_bytes(), fds)
            .context("cannot send to the daemon")?;
        Ok(id)
    }

    /// Waits for the reply to request `id` (sent by [`send_with_fds`](Self::send_with_fds));
    /// events that arrive meanwhile are kept for [`next`](Self::next).
    pub fn reply(&mut self, id: u64) -> anyhow::Result<Value> {
        loop {
            let mut l = String::new();
            let n = self.reader.read_line(&mut l).map_err(|e| {
                let why = if timed_out(&e) {
                    format!(
                        "the sandgate daemon did not answer in time; if it is stuck, \
                         `kill $(cat {})` ends it (the next command starts a new one)",
                        crate::Paths::discover().pid_file.display()
                    )
                } else {
                    format!("cannot read from the daemon: {e}")
                };
                anyhow::anyhow!(why)
            })?;
            if n == 0 {
                bail!("the daemon closed the connection before replying");
            }
            let v: Value = match serde_json::from_str(&l) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v.get("event").is_some() {
                if let Ok(ev) = serde_json::from_value(v) {
                    self.events.push_back(ev);
                }
                continue;
            }
            let reply: Reply = serde_json::from_value(v).context("unreadable reply")?;
            if reply.id.is_some() && reply.id != Some(id) {
                continue;
            }
            return match (reply.ok, reply.error) {
                (true, _) => Ok(reply.result.unwrap_or(Value::Null)),
                (false, Some(e)) => Err(DaemonError { code: e.code, message: e.message }.into()),
                (false, None) => bail!("the daemon refused the request without saying why"),
            };
        }
    }

    /// [`request_with_fds`](Self::request_with_fds) without descriptors.
    pub fn request(&mut self, request: Request) -> anyhow::Result<Value> {
        self.request_with_fds(request, &[])
    }

    /// The next event (blocking), or `Closed`.
    // Not an `Iterator`: the end of the stream is a value (`Closed`) and a read can fail.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> std::io::Result<Incoming> {
        if let Some(ev) = self.events.pop_front() {
            return Ok(Incoming::Event(Box::new(ev)));
        }
        loop {
            let mut l = String::new();
            if self.reader.read_line(&mut l)? == 0 {
                return Ok(Incoming::Closed);
            }
            if let Ok(ev) = serde_json::from_str::<Event>(&l) {
                return Ok(Incoming::Event(Box::new(ev)));
            }
        }
    }

    /// The next line as JSON (an event or a reply), events kept earlier first; `None` at the end.
    pub fn next_value(&mut self) -> std::io::Result<Option<Value>> {
        if let Some(ev) = self.events.pop_front() {
            return Ok(serde_json::to_value(ev).ok());
        }
        loop {
            let mut l = String::new();
            if self.reader.read_line(&mut l)? == 0 {
                return Ok(None);
            }
            if let Ok(v) = serde_json::from_str::<Value>(&l) {
                return Ok(Some(v));
            }
        }
    }

    /// Reads the reply to a `hello` sent earlier (see [`send_with_fds`](Self::send_with_fds))
    /// and checks the daemon's protocol version in it.
    pub fn hello_reply(&mut self, id: u64) -> anyhow::Result<Value> {
        let v = self.reply(id)?;
        let theirs = v["protocol"].as_u64().unwrap_or(0);
        if theirs != u64::from(PROTOCOL_VERSION) {
            bail!(
                "the running daemon speaks protocol {theirs}, this sandgate {PROTOCOL_VERSION}: \
                 restart it with `sandgate stop` (launchers start a new one)"
            );
        }
        Ok(v)
    }
}

/// Whether a read failed because its timeout ([`Client::set_read_timeout`]) passed.
pub fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// Starts `sandgate daemon --detach --idle-exit 10m` and waits until it answers.
pub fn start_daemon(paths: &Paths) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    paths.ensure_dir()?;
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&paths.start_lock)
        .with_context(|| format!("cannot open {}", paths.start_lock.display()))?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", paths.start_lock.display()))?;
    // Another launcher may have started one while we waited for the lock.
    if UnixStream::connect(&paths.socket).is_ok() {
        return Ok(());
    }
    let exe = crate::sandgate_exe().context("path of the sandgate binary")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&paths.log)
        .with_context(|| format!("cannot open {}", paths.log.display()))?;
    let mut child = std::process::Command::new(exe)
        .args(["daemon", "--detach", "--idle-exit", "10m"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start the sandgate daemon")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if UnixStream::connect(&paths.socket).is_ok() {
            // Reap it later without blocking: it outlives us normally.
            std::thread::spawn(move || child.wait());
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("the sandgate daemon exited at start ({status}):\n{}", tail(&paths.log, 5));
        }
        if Instant::now() > deadline {
            bail!(
                "the sandgate daemon did not answer within 10 s; its log {} says:\n{}",
                paths.log.display(),
                tail(&paths.log, 5)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
