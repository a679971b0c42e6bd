//! The launcher's side of the daemon: hand the sandbox's proxy listener and NFLOG socket to the
//! daemon (starting one if none answers), show its questions on the terminal, print blocked
//! traffic with `--report-blocked`, and, when the daemon dies, keep the descriptors and register
//! them again with the next daemon, so the sandbox gets its network back without a restart.

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use crate::Paths;
use crate::client::Client;
use crate::protocol::{Envelope, Event, FdKind, Request, SandboxInfo};

/// Request id of the final `unregister` (the reader thread stops at its reply).
const UNREGISTER_ID: u64 = u64::MAX / 2;

/// What the launcher prints.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--report-blocked`: one stderr line per blocked destination.
    pub report_blocked: bool,
    /// Questions and answers about this sandbox on `/dev/tty`.
    pub tty_notices: bool,
    /// Without a terminal: held and refused requests as one line each on stderr, which is what
    /// an agent reads (unless `--quiet`).
    pub stderr_notices: bool,
}

/// A sandbox registered with the daemon.
pub struct DaemonLink {
    id: String,
    writer: Arc<Mutex<Option<UnixStream>>>,
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    /// Disconnected when the link thread returns: `finish` blocks on it instead of polling.
    ended: std::sync::mpsc::Receiver<()>,
    /// Whether `unregister` went out (by [`DaemonLink::unregister`]); `None`: not yet.
    unregistered: Option<bool>,
}

struct Fds {
    listener: OwnedFd,
    nflog: Option<OwnedFd>,
    dns: Option<[OwnedFd; 2]>,
}

impl Fds {
    fn raw(&self) -> (Vec<FdKind>, Vec<RawFd>) {
        let mut kinds = vec![FdKind::Listener];
        let mut raw = vec![self.listener.as_raw_fd()];
        if let Some(n) = &self.nflog {
            kinds.push(FdKind::Nflog);
            raw.push(n.as_raw_fd());
        }
        if let Some([udp, tcp]) = &self.dns {
            kinds.extend([FdKind::DnsUdp, FdKind::DnsTcp]);
            raw.extend([udp.as_raw_fd(), tcp.as_raw_fd()]);
        }
        (kinds, raw)
    }
}

fn register(c: &mut Client, info: &SandboxInfo, fds: &Fds) -> anyhow::Result<Value> {
    let (kinds, raw) = fds.raw();
    c.request_with_fds(Request::Register { sandbox: info.clone(), fds: kinds }, &raw)
}

/// A connection to the daemon on which `hello` is sent and not yet answered: made while the
/// sandbox sets up, so that its round trip is not on the launch's path (see
/// [`DaemonLink::start`]).
pub struct Greeting {
    client: Client,
    paths: Paths,
    hello: u64,
}

impl Greeting {
    /// Connects (starting a daemon when none answers) and sends `hello` without waiting.
    pub fn send() -> anyhow::Result<Greeting> {
        let paths = Paths::discover();
        let client = Client::connect_or_start(&paths)?;
        Greeting::hello(client, paths)
    }

    /// [`Greeting::send`] to a daemon that runs already, `None` when none answers: a daemon is
    /// started only once the sandbox is there (a launch that fails starts none).
    // Only the Linux launcher greets while the sandbox sets up; macOS greets after the launch.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn send_if_running() -> Option<Greeting> {
        let paths = Paths::discover();
        let client = Client::connect(&paths).ok()?;
        Greeting::hello(client, paths).ok()
    }

    /// Whether a running daemon answers `hello` in this launcher's protocol (one round trip).
    pub fn running_speaks_this_protocol() -> bool {
        Greeting::send_if_running()
            .is_some_and(|Greeting { mut client, hello, .. }| client.hello_reply(hello).is_ok())
    }

    fn hello(mut client: Client, paths: Paths) -> anyhow::Result<Greeting> {
        let hello = client.send_with_fds(Request::Hello, &[])?;
        Ok(Greeting { client, paths, hello })
    }
}

/// How long a launcher waits for a network made ahead.
#[cfg(target_os = "linux")]
const ASK_TIMEOUT: Duration = Duration::from_millis(250);

/// A network asked of the running daemon (a connection to its network socket of the kind, see
/// `network_sockets`), its answer not read yet: the round trip overlaps the launcher's policy
/// work.
#[cfg(target_os = "linux")]
pub struct NetworkAsked {
    stream: UnixStream,
    /// The answer is given up after this (see [`ASK_TIMEOUT`]).
    deadline: std::time::Instant,
}

#[cfg(target_os = "linux")]
impl NetworkAsked {
    /// Asks the running daemon (none is started for this) for a network of `kind` made ahead.
    /// A daemon whose backlog is full is not waited for (the connect does not block).
    pub fn send(kind: sandgate_sandbox::NetKind) -> Option<NetworkAsked> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
        use std::os::fd::AsRawFd as _;
        let deadline = std::time::Instant::now() + ASK_TIMEOUT;
        let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
        let fd = socket(AddressFamily::Unix, SockType::Stream, flags, None).ok()?;
        // Connecting is the request (see `network_sockets`).
        let path = Paths::discover().network_socket(kind);
        connect(fd.as_raw_fd(), &UnixAddr::new(&path).ok()?).ok()?;
        let stream = UnixStream::from(fd);
        stream.set_nonblocking(false).ok()?;
        Some(NetworkAsked { stream, deadline })
    }

    /// Whether the daemon answered in this launcher's protocol (`None`: no answer came by the
    /// deadline, or none could be read), and the network (see `netpool`): `None` when none was
    /// ready, no answer came, or anything is amiss (the sandbox then makes its own). Descriptors
    /// that came with an answer not taken are closed.
    pub fn receive(self) -> (Option<bool>, Option<sandgate_sandbox::PreparedNetwork>) {
        let mut speaks = None;
        let network = self.read(&mut speaks);
        (speaks, network)
    }

    fn read(self, speaks: &mut Option<bool>) -> Option<sandgate_sandbox::PreparedNetwork> {
        let (mut got, mut fds) = (Vec::new(), Vec::new());
        let mut buf = [0u8; 1024];
        let mut tried = false;
        let end = loop {
            if let Some(end) = got.iter().position(|&b| b == b'\n') {
                break end;
            }
            // A busy daemon answers in well under a millisecond; a stuck one must not hold up
            // the launch (least of all `run`'s, which needs no daemon). An answer already there
            // is read even past the deadline (the launcher may have been slow, not the daemon).
            let left = self.deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() && tried {
                return None;
            }
            tried = true;
            self.stream.set_read_timeout(Some(left.max(Duration::from_millis(1)))).ok()?;
            let (n, more) = sandgate_sandbox::fdpass::recv_with_fds(&self.stream, &mut buf).ok()?;
            if n == 0 {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
            fds.extend(more);
        };
        let reply: crate::protocol::Reply = serde_json::from_slice(&got[..end]).ok()?;
        *speaks = Some(reply.result.as_ref().is_some_and(|r| {
            r["protocol"].as_u64() == Some(u64::from(crate::protocol::PROTOCOL_VERSION))
        }));
        let result = reply.result?;
        let network = result.get("network").cloned().filter(|n| !n.is_null())?;
        let id = sandgate_sandbox::SandboxId::try_from(network["sandbox"].as_str()?).ok()?;
        let kind = sandgate_sandbox::NetKind::from_name(network["kind"].as_str()?)?;
        let group = u16::try_from(network["group"].as_u64()?).ok()?;
        let user = network["user"].as_bool()?;
        sandgate_sandbox::PreparedNetwork::from_fds(id, group, kind, false, user, fds).ok()
    }
}

impl DaemonLink {
    /// Registers the sandbox on `greeting` (a connection made by [`Greeting::send`], or made
    /// now when `None`) once the daemon's `hello` says it speaks this protocol, and starts the
    /// thread that follows the connection.
    pub fn start(
        greeting: Option<anyhow::Result<Greeting>>,
        info: SandboxInfo,
        listener: OwnedFd,
        nflog: Option<OwnedFd>,
        dns: Option<[OwnedFd; 2]>,
        out: Output,
    ) -> anyhow::Result<DaemonLink> {
        let Greeting { mut client, paths, hello } = greeting.unwrap_or_else(Greeting::send)?;
        client.hello_reply(hello)?;
        let fds = Fds { listener, nflog, dns };
        let reply = register(&mut client, &info, &fds).context("the daemon refused the sandbox")?;
        // A guest-user fence the daemon found open: said at every launch until it is back.
        for line in reply["fences_open"].as_array().into_iter().flatten().filter_map(Value::as_str)
        {
            eprintln!("sandgate: warning: {}", sandgate_config::sanitize(line));
        }
        let writer = Arc::new(Mutex::new(Some(client.try_clone_stream()?)));
        let done = Arc::new(AtomicBool::new(false));
        let id = info.id.clone();
        let (ending, ended) = std::sync::mpsc::channel::<()>();
        let thread = {
            let (writer, done) = (writer.clone(), done.clone());
            std::thread::Builder::new()
                .name("sandgate-link".into())
                .spawn(move || {
                    // Dropped when `follow` returns (or unwinds): wakes `finish` at once.
                    let _ending = ending;
                    follow(client, paths, info, fds, writer, done, out)
                })
                .context("cannot start the daemon link thread")?
        };
        Ok(DaemonLink { id, writer, done, thread, ended, unregistered: None })
    }

    /// Reports the command's end to the daemon without waiting for its answer: called as soon as
    /// the sandbox's init says the command ended, so that the daemon's work and the round trip
    /// overlap the namespaces' teardown. Once; [`DaemonLink::finish`] waits for the answer.
    pub fn unregister(&mut self, exit_status: i32, flush_blocked: bool) {
        if self.unregistered.is_some() {
            return;
        }
        self.done.store(true, Ordering::Release);
        let line = serde_json::to_string(&Envelope {
            id: Some(UNREGISTER_ID),
            request: Request::Unregister {
                sandbox: self.id.clone(),
                exit_status: Some(exit_status),
                flush_blocked,
            },
        })
        .unwrap_or_default();
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let sent = match w.as_mut() {
            Some(s) => {
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                s.write_all(format!("{line}\n").as_bytes()).is_ok()
            }
            None => false,
        };
        self.unregistered = Some(sent);
    }

    /// Reports the command's end to the daemon (unless [`DaemonLink::unregister`] did) and waits
    /// (briefly) for the answer, which carries the last blocked-traffic lines.
    pub fn finish(mut self, exit_status: i32, flush_blocked: bool) {
        self.unregister(exit_status, flush_blocked);
        if self.unregistered != Some(true) {
            self.shutdown();
        }
        // Woken by the thread's end (the daemon's answer to `unregister` read), not by polling
        // every 2 ms: a poll interval was added to every `net` and `build` launch.
        let _ = self.ended.recv_timeout(Duration::from_secs(2));
        self.shutdown();
        let _ = self.thread.join();
    }

    fn shutdown(&self) {
        if let Some(s) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Follows the connection: prints events; when the daemon goes away, waits for (or starts) the
/// next one and registers the same descriptors with it.
fn follow(
    mut client: Client,
    paths: Paths,
    info: SandboxInfo,
    fds: Fds,
    writer: Arc<Mutex<Option<UnixStream>>>,
    done: Arc<AtomicBool>,
    out: Output,
) {
    let tty = out.tty_notices;
    let mut stopping = false;
    loop {
        if let Ok(Some(v)) = client.next_value() {
            {
                if v.get("event").is_some() {
                    if let Ok(ev) = serde_json::from_value::<Event>(v) {
                        if matches!(ev, Event::DaemonStopping) {
                            stopping = true;
                        }
                        show(&ev, &info.id, out, tty);
                    }
                } else if v["id"].as_u64() == Some(UNREGISTER_ID) {
                    // The last blocked packets, drained by the daemon at the end.
                    for b in v["result"]["blocked"].as_array().into_iter().flatten() {
                        if let Ok(ev) = serde_json::from_value::<Event>(b.clone()) {
                            show(&ev, &info.id, out, false);
                        }
                    }
                    return;
                }
                continue;
            }
        }
        if done.load(Ordering::Acquire) {
            return;
        }
        // The daemon went away.
        *writer.lock().unwrap_or_else(|e| e.into_inner()) = None;
        sandgate_sandbox::notice::notice(&format!(
            "sandgate: the daemon {}; {} has no network until {}",
            if stopping { "was stopped" } else { "went away" },
            info.id,
            if stopping { "one is started again" } else { "it is back (restarting it)" }
        ));
        let mut backoff = Duration::from_millis(20);
        let mut said = false;
        client = loop {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
            if done.load(Ordering::Acquire) {
                return;
            }
            let c = if stopping {
                Client::connect(&paths).map_err(anyhow::Error::from)
            } else {
                Client::connect_or_start(&paths)
            };
            let failure = match c.and_then(|mut c| register(&mut c, &info, &fds).map(|_| c)) {
                Ok(c) => break c,
                Err(e) => e,
            };
            // After `sandgate stop` the daemon is meant to be away; otherwise say (once) why it
            // is not back, then keep trying, more slowly.
            if !stopping && !said {
                said = true;
                sandgate_sandbox::notice::notice(&format!(
                    "sandgate: cannot get {} served again yet: {failure:#}",
                    info.id
                ));
                sandgate_sandbox::notice::notice(&format!(
                    "sandgate: still trying; the daemon's log is {}",
                    paths.log.display()
                ));
                backoff = Duration::from_secs(1);
            }
            tracing::debug!(error = %failure, "re-register failed");
        };
        if let Ok(s) = client.try_clone_stream() {
            *writer.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
        }
        stopping = false;
        sandgate_sandbox::notice::notice(&format!(
            "sandgate: {} is registered with the daemon again; network is back",
            info.id
        ));
    }
}

/// Writes one event's line, if it has one for this launcher, where the command's stderr goes,
/// between the command's lines ([`sandgate_sandbox::notice`]). `tty`: the person is at the
/// terminal (the lines a person acts on), else the lines an agent reads.
fn show(ev: &Event, id: &str, out: Output, tty: bool) {
    if let Some(line) = event_line(ev, id, out, tty) {
        sandgate_sandbox::notice::notice(&line);
    }
}

/// The notice for `ev` (see [`show`]); `None` when it has none for this launcher.
fn event_line(ev: &Event, id: &str, out: Output, tty: bool) -> Option<String> {
    match ev {
        Event::Blocked { sandbox, protocol, dst, port, .. }
            if out.report_blocked && sandbox == id =>
        {
            let dst = match (dst.contains(':'), port) {
                (true, Some(p)) => format!("[{dst}]:{p}"),
                (false, Some(p)) => format!("{dst}:{p}"),
                (_, None) => dst.clone(),
            };
            Some(format!("sandgate: blocked {protocol} {dst}"))
        }
        Event::Request { method, decision, host, count, samples, .. }
            if out.stderr_notices && decision != "allow" && method == "DNS" && *count > 1 =>
        {
            Some(dns_summary_line(host, *count, samples))
        }
        Event::Asked { question } if tty => Some(asked_line(&question.question)),
        Event::Asked { question } if out.stderr_notices => Some(held_line(question)),
        Event::Request { method, decision, host, rule, .. }
            if out.stderr_notices && decision != "allow" && method == "DNS" =>
        {
            dns_refused_line(decision, host, rule)
        }
        Event::EventsCapped { sandbox, decision, not_stored, standing_for, per_minute, burst }
            if sandbox == id =>
        {
            Some(format!(
                "sandgate: {not_stored} of this sandbox's traffic events ({standing_for} {}) were \
                 not stored, only counted (`sandgate log` shows the count): faster than {burst} \
                 at once, then {per_minute} a minute (`[daemon] events_per_minute`)",
                crate::protocol::capped_what(decision)
            ))
        }
        Event::Request { decision, host, port, rule, .. }
            if out.stderr_notices && decision != "allow" =>
        {
            Some(refused_line(decision, host, *port, rule))
        }
        // An HTTPS client shows only "502" for this (a plain-HTTP one prints the body).
        Event::Request { host, port, rule, .. }
            if out.stderr_notices && rule == sandgate_proxy::Refusal::UNRESOLVABLE =>
        {
            let target = sandgate_approvals::terminal::sanitize(&format!("{host}:{port}"));
            Some(format!(
                "sandgate: {target} is allowed, but the name does not resolve (sandgate resolves \
                 it on the host); check the spelling"
            ))
        }
        Event::Answered { question, answer, by, pattern } if tty => {
            Some(sandgate_approvals::terminal::format_event(
                &sandgate_approvals::BrokerEvent::Answered {
                    question: question.clone(),
                    answer: *answer,
                    by: by.clone(),
                    pattern: pattern.clone(),
                },
                std::time::SystemTime::now(),
            ))
        }
        Event::TimedOut { question } if tty => Some(sandgate_approvals::terminal::format_event(
            &sandgate_approvals::BrokerEvent::TimedOut(question.clone()),
            std::time::SystemTime::now(),
        )),
        Event::Answered { .. } | Event::TimedOut { .. } if out.stderr_notices => ended_line(ev),
        _ => None,
    }
}

/// The line the launcher's terminal shows for a question. Every field is cleaned of control
/// characters: whatever a sandbox manages to put in a question must not reach the person's
/// terminal as an escape sequence.
fn asked_line(q: &sandgate_approvals::Question) -> String {
    use sandgate_approvals::terminal::sanitize;
    // Host and port first, the sandbox's own text (its name) last and quoted: it cannot pose as
    // the host or the suggested answer.
    let (sandbox, target) = (sanitize(&q.sandbox), sanitize(&format!("{}:{}", q.host, q.port)));
    let who = q.process.as_ref().map(|p| format!("{p} ")).unwrap_or_default();
    format!(
        "sandgate: {who}wants {target} — `sandgate allow {target}` (--once, --for 1h, --always) or \
         `sandgate deny {target}`; keys in `sandgate watch` — sandbox {sandbox:?}"
    )
}

/// The stderr line for a held request: what waits, how a person lets it through, and how long
/// the question waits, next to what common clients wait.
fn held_line(q: &sandgate_approvals::PendingQuestion) -> String {
    use sandgate_approvals::terminal::sanitize;
    let target = sanitize(&host_port(&q.question.host, q.question.port));
    let wait = q.deadline.duration_since(q.first_asked).unwrap_or_default().as_secs();
    let who = q.question.process.as_ref().map(|p| format!(", asked by {p}")).unwrap_or_default();
    format!(
        "sandgate: waiting for approval of {target} ({wait} s){who} — a person runs `sandgate \
         allow {target}` or `sandgate deny {target}` (or answers in `sandgate watch` or the \
         chat); clients may give up first (cargo 30 s, pip 15 s)"
    )
}

/// `host:port`, an IPv6 address in brackets (`[2a01:4f8::2]:443`, as `sandgate allow` takes it).
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The stderr line for a request the proxy refused without asking.
fn refused_line(decision: &str, host: &str, port: u16, rule: &str) -> String {
    use sandgate_approvals::terminal::sanitize;
    let target = sanitize(&host_port(host, port));
    let host = sanitize(host);
    let rule = sanitize(rule);
    if decision == "reject" {
        return format!("sandgate: refused a malformed request ({rule})");
    }
    if rule == sandgate_proxy::Refusal::NOT_GIVEN {
        // Nothing to allow: the address stands for no destination in this sandbox.
        return format!(
            "sandgate: denied {target}: {rule} (it stands for no destination here; \
             connect to the host by name)"
        );
    }
    if rule.contains("your organisation's policy") {
        // The managed layer: no answer, file or flag here can allow it.
        return format!(
            "sandgate: denied {target}: blocked by your organisation's policy ({rule}); nobody \
             on this machine can allow it (`sandgate check {target}` explains)"
        );
    }
    if rule == sandgate_proxy::Refusal::UNATTENDED {
        return format!(
            "sandgate: denied {target}: not on the allowlist, and this run is unattended \
             (nobody asked); `sandgate log --summary` lists what would have been asked"
        );
    }
    if let Some((ip, why)) = sandgate_proxy::guard::refusal_in_rule(&rule) {
        // Allowing the name (what the line below suggests) would not help: the address must be.
        let ip_target = match ip {
            std::net::IpAddr::V4(_) => format!("{ip}:{port}"),
            std::net::IpAddr::V6(_) => format!("[{ip}]:{port}"),
        };
        return format!(
            "sandgate: denied {target}: the name resolves to {ip}, {why}, which sandboxes \
             may not reach (the address guard); allowing {host} does not change that. If {ip} \
             is meant, a person allows the address itself: `sandgate allow {ip_target}`, or \
             {ip} in [network] allow (`sandgate check {target}` explains)"
        );
    }
    format!(
        "sandgate: denied {target} ({rule}); to ask for it, have a person run `sandgate \
         allow {host}`, or add it to [network] allow (`sandgate check {target}` \
         explains)"
    )
}

/// The stderr line for a name the DNS stub did not answer, once per name (a lookup asks for A
/// and AAAA, and resolvers retry): `None` when this name was already shown.
fn dns_refused_line(decision: &str, host: &str, rule: &str) -> Option<String> {
    use sandgate_approvals::terminal::sanitize;
    static SHOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    {
        let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
        if shown.iter().any(|h| h == host) {
            return None;
        }
        if shown.len() >= 256 {
            shown.clear();
        }
        shown.push(host.to_owned());
    }
    let (host, rule) = (sanitize(host), sanitize(rule));
    if decision == "reject" {
        return Some(format!("sandgate: DNS: refused a malformed query ({rule})"));
    }
    Some(format!(
        "sandgate: DNS: no answer for {host} ({rule}); it resolves once allowed: a person runs \
         `sandgate allow {host}` (`sandgate check {host}:443` explains)"
    ))
}

/// The stderr line for the DNS stub's summary of the names it refused under `domain` after the
/// first (shown on its own): how many, and some of them.
fn dns_summary_line(domain: &str, count: u64, samples: &[String]) -> String {
    use sandgate_approvals::terminal::sanitize;
    let samples: Vec<String> = samples.iter().map(|s| sanitize(s)).collect();
    format!(
        "sandgate: DNS: no answer for {count} more names under {} (e.g. {})",
        sanitize(domain),
        samples.join(", ")
    )
}

/// The stderr line when a question about this sandbox ends without letting it through.
fn ended_line(ev: &Event) -> Option<String> {
    use sandgate_approvals::terminal::sanitize;
    match ev {
        // "127.0.0.1:8080 was denied for this session in Telegram by @bob" (it said "was
        // denied by in Telegram by @bob (denied for this session)").
        Event::Answered { question, answer, by, .. } if !answer.allows() => Some(format!(
            "sandgate: {}:{} was {answer} {}; do not retry it: ask the person if it is needed",
            sanitize(&question.question.host),
            question.question.port,
            sanitize(&by.to_string()),
        )),
        Event::TimedOut { question } => Some(format!(
            "sandgate: nobody answered about {host}:{port} in time: denied; the next request \
             asks again",
            host = sanitize(&question.question.host),
            port = question.question.port,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Output, asked_line, event_line, host_port, refused_line};

    fn request(decision: &str, host: &str, port: u16, rule: &str) -> Event {
        Event::Request {
            sandbox: "sg-1".into(),
            method: "CONNECT".into(),
            host: host.into(),
            port,
            path: None,
            decision: decision.into(),
            rule: rule.into(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 1.0,
            error: None,
            count: 1,
            samples: Vec::new(),
            process: None,
        }
    }

    /// An IPv6 destination is written `[address]:port` however the event names it (the
    /// transparent path already brackets it), so the port cannot be read as part of it.
    #[test]
    fn ipv6_destinations_are_written_in_brackets() {
        for (host, port, want) in [
            ("example.com", 443, "example.com:443"),
            ("45.90.7.2", 5432, "45.90.7.2:5432"),
            ("2a0e:97c0:3e0::2", 5432, "[2a0e:97c0:3e0::2]:5432"),
            ("[2a0e:97c0:3e0::2]", 5432, "[2a0e:97c0:3e0::2]:5432"),
        ] {
            assert_eq!(host_port(host, port), want);
            let line = refused_line("deny", host, port, "approval timed out");
            assert!(line.starts_with(&format!("sandgate: denied {want} (")), "{line}");
        }
    }

    /// Issue 32, part 3: what an agent reads on stderr for a refusal by the address guard (how
    /// to allow the address itself: the name's grant does not help) and for an allowed name that
    /// does not resolve (an HTTPS client shows only `502`).
    #[test]
    fn guard_refusals_and_unresolvable_names_say_what_to_do() {
        let out = Output { report_blocked: false, tty_notices: false, stderr_notices: true };
        let line = |ev: Event| event_line(&ev, "sg-1", out, false);
        let guard = line(request(
            "deny",
            "rebind.test",
            8080,
            "address guard: 127.0.0.1 is a loopback address",
        ))
        .unwrap();
        assert_eq!(
            guard,
            "sandgate: denied rebind.test:8080: the name resolves to 127.0.0.1, a loopback \
             address, which sandboxes may not reach (the address guard); allowing rebind.test \
             does not change that. If 127.0.0.1 is meant, a person allows the address itself: \
             `sandgate allow 127.0.0.1:8080`, or 127.0.0.1 in [network] allow (`sandgate check \
             rebind.test:8080` explains)"
        );
        let v6 = line(request(
            "deny",
            "v6.test",
            443,
            "address guard: fd00::1 is a private network address",
        ));
        assert!(v6.unwrap().contains("`sandgate allow [fd00::1]:443`"));
        // An address of the stub's block never given: nothing to allow, said so.
        let not_given =
            line(request("deny", "198.18.0.9", 443, sandgate_proxy::Refusal::NOT_GIVEN)).unwrap();
        assert!(
            not_given.starts_with("sandgate: denied 198.18.0.9:443: an address"),
            "{not_given}"
        );
        assert!(!not_given.contains("sandgate allow"), "{not_given}");
        // The managed layer's and an unattended run's: asking a person here does not help.
        let managed = line(request(
            "deny",
            "x.test",
            443,
            "your organisation's policy allows only its own list, /etc/sandgate/managed.toml",
        ))
        .unwrap();
        assert!(managed.contains("blocked by your organisation's policy"), "{managed}");
        assert!(!managed.contains("sandgate allow"), "{managed}");
        let unattended =
            line(request("deny", "x.test", 443, sandgate_proxy::Refusal::UNATTENDED)).unwrap();
        assert!(unattended.contains("unattended") && !unattended.contains("sandgate allow"));
        // Another denial keeps the usual line: asking for the name does help there.
        let other = line(request("deny", "x.test", 443, "deny x.test (command line)")).unwrap();
        assert!(other.contains("have a person run `sandgate allow x.test`"), "{other}");
        let unresolvable = line(request("allow", "typo.test", 443, "name does not resolve"));
        assert_eq!(
            unresolvable.as_deref(),
            Some(
                "sandgate: typo.test:443 is allowed, but the name does not resolve (sandgate \
                 resolves it on the host); check the spelling"
            )
        );
        assert_eq!(line(request("allow", "ok.test", 443, "ok.test (command line)")), None);
        let quiet = Output { stderr_notices: false, ..out };
        let ev = request("allow", "typo.test", 443, "name does not resolve");
        assert_eq!(event_line(&ev, "sg-1", quiet, false), None);
    }

    /// Issue 32, part 3: the line an agent reads when a person denies its request
    /// (`…was denied by in Telegram by @bob (denied for this session)` before).
    #[test]
    fn a_persons_denial_reads_as_a_sentence() {
        use sandgate_approvals::{Answer, Channel, PendingQuestion, Question, Responder, Scope};
        let question = PendingQuestion {
            id: sandgate_approvals::QuestionId(3),
            question: Question {
                sandbox: "sg-1".into(),
                host: "127.0.0.1".into(),
                port: 8080,
                method: None,
                path: None,
                command: vec!["curl".into()],
                cwd: None,
                project: None,
                process: None,
            },
            first_asked: std::time::SystemTime::now(),
            deadline: std::time::SystemTime::now(),
            waiters: 1,
        };
        let out = Output { report_blocked: false, tty_notices: false, stderr_notices: true };
        let rows = [
            (
                Answer::Deny(Scope::Session),
                Responder::new(Channel::Telegram, "@bob"),
                Some(
                    "sandgate: 127.0.0.1:8080 was denied for this session in Telegram by @bob; \
                     do not retry it: ask the person if it is needed",
                ),
            ),
            (
                Answer::Deny(Scope::Once),
                Responder::new(Channel::Cli, "alice"),
                Some(
                    "sandgate: 127.0.0.1:8080 was denied once in the CLI by alice; do not \
                     retry it: ask the person if it is needed",
                ),
            ),
            // An allow says nothing to the agent: the request goes through.
            (Answer::Allow(Scope::Once), Responder::new(Channel::Cli, "alice"), None),
        ];
        for (answer, by, want) in rows {
            let ev = Event::Answered {
                question: question.clone(),
                answer,
                by,
                pattern: "127.0.0.1".into(),
            };
            assert_eq!(event_line(&ev, "sg-1", out, false).as_deref(), want);
        }
    }

    #[test]
    fn the_asked_line_carries_no_escape_sequence() {
        let q = sandgate_approvals::Question {
            sandbox: "sg-1\x1b]0;pwned\x07".into(),
            host: "x.example\x1b[2J".into(),
            port: 443,
            method: Some("GET".into()),
            path: Some("/\x1b[31m".into()),
            command: vec!["curl\x1b[H".into()],
            cwd: Some("/p\r".into()),
            project: None,
            process: None,
        };
        let line = asked_line(&q);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert_eq!(
            line,
            "sandgate: wants x.example?[2J:443 — `sandgate allow x.example?[2J:443` (--once, \
             --for 1h, --always) or `sandgate deny x.example?[2J:443`; keys in `sandgate watch` \
             — sandbox \"sg-1?]0;pwned?\""
        );
        // A sandbox named to look like a host comes last, quoted.
        let spoof = sandgate_approvals::Question {
            sandbox: "x\" wants github.com:443 — `sandgate allow github.com:443`".into(),
            ..q
        };
        let line = asked_line(&spoof);
        assert!(line.starts_with("sandgate: wants x.example?[2J:443 — "), "{line}");
        assert!(
            line.ends_with(
                "sandbox \"x\\\" wants github.com:443 — `sandgate allow github.com:443`\""
            ),
            "{line}"
        );
    }
}
