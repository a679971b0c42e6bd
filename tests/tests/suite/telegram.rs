//! The Telegram channel end to end: the real binary, its daemon and proxy, and a fake Bot API
//! server on 127.0.0.1 that the daemon's bot talks to (`[telegram] api_url`).
//!
//! The fake records every call (`sendMessage`, `editMessageText`, `answerCallbackQuery`, ...)
//! with its arrival time and serves `getUpdates` from a queue the test pushes to, holding the
//! long poll open until an update is queued or about a second passes, as the real API does.
//! Every test has its own `Env`, so its own daemon (stopped by `Env`'s drop) and its own fake.
//!
//! Latency figures are printed (`--nocapture`; `bench/telegram-latency.sh` collects them), never
//! asserted (a loaded machine is not a slow sandgate):
//! from a blocked request to the question arriving at the fake server, and from the moment
//! `getUpdates` hands over the button press to the held request's response inside the sandbox.
//! Both clocks are the wall clock (`SystemTime` here, `time.time()` in the sandboxed Python
//! client).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use crate::support::daemon::{
    DaemonEnv, can_sandbox, curl_within, finish, has_script, lines_of, wait_until,
};
use sandgate_test_support::telegram::{Call, Failure, text};
use sandgate_tests::skip_unless;
use serde_json::{Value, json};

/// An HTTP origin on 127.0.0.1 answering `hello`.
fn origin() -> u16 {
    sandgate_tests::origin("hello")
}

/// The token the fake accepts (in the URL path, as the Bot API wants it).
const TOKEN: &str = "123456:TEST-token";
/// The secret half: must never appear in the daemon's log.
const SECRET: &str = "TEST-token";
/// The chat the bot obeys.
const CHAT: i64 = 42;
/// A chat it must ignore.
const STRANGER: i64 = 666;
/// How long the fake holds a `getUpdates` with nothing to deliver.
const LONG_POLL: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// The fake Bot API server: sandgate-test-support's, shared with the bot's own tests
// ---------------------------------------------------------------------------------------------

/// The shared fake with this file's token and long poll; its methods are reached through `Deref`.
struct FakeTelegram(sandgate_test_support::telegram::FakeTelegram);

impl std::ops::Deref for FakeTelegram {
    type Target = sandgate_test_support::telegram::FakeTelegram;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl FakeTelegram {
    /// Listens on 127.0.0.1:0, accepts [`TOKEN`], holds a `getUpdates` at most [`LONG_POLL`].
    fn start() -> FakeTelegram {
        FakeTelegram(sandgate_test_support::telegram::FakeTelegram::start_with(TOKEN, LONG_POLL))
    }
}

/// A predicate: the body's text contains `needle`.
/// A message's text after the `[user@host] ` every message of the daemon's bot starts with.
fn untagged(text: &str) -> &str {
    let rest = text.strip_prefix('[').and_then(|t| t.split_once("] ")).map(|(_, rest)| rest);
    rest.unwrap_or_else(|| panic!("{text:?} does not name its machine"))
}

fn text_has(needle: &str) -> impl Fn(&Value) -> bool + '_ {
    move |b| text(b).contains(needle)
}

/// The callback data of the button labelled `label` in a `sendMessage` body.
fn button(body: &Value, label: &str) -> String {
    let rows = body["reply_markup"]["inline_keyboard"].as_array().expect("inline keyboard");
    rows.iter()
        .flat_map(|r| r.as_array().into_iter().flatten())
        .find(|b| b["text"] == label)
        .and_then(|b| b["callback_data"].as_str())
        .unwrap_or_else(|| panic!("no button {label:?} in {body}"))
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// The environment: binary, daemon, sandboxes, origins
// ---------------------------------------------------------------------------------------------

impl DaemonEnv {
    /// A config; every command without the caller's proxy variables (the bot's HTTP client would
    /// follow them; the fake is on loopback) or bot token.
    fn telegram(config: &str) -> DaemonEnv {
        let mut t = DaemonEnv::new(config);
        for v in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
            "SANDGATE_TELEGRAM_TOKEN",
        ] {
            t.vars.push((v.into(), None));
        }
        t
    }

    /// A config whose bot talks to `fake` with the token in the file.
    fn with_bot(fake: &FakeTelegram, extra: &str) -> DaemonEnv {
        DaemonEnv::telegram(&format!(
            "[daemon]\nask_timeout = \"30s\"\n\n[telegram]\ntoken = \"{TOKEN}\"\nchats = [{CHAT}]\n\
             api_url = \"{}\"\n{extra}",
            fake.url
        ))
    }

    /// A sandboxed `curl` of `http://127.0.0.1:PORT/` that prints the status code.
    fn spawn_curl(&self, port: u16) -> Child {
        let cmd = curl_within(&format!("http://127.0.0.1:{port}/"), 40);
        self.spawn_net(&[], &cmd.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.env.root.path().join("run/sandgate/daemon.log"))
            .unwrap_or_default()
    }

    /// The one open question (waits for it).
    fn pending_one(&self) -> Value {
        let mut p = Value::Null;
        wait_until("one pending question", Duration::from_secs(20), || {
            p = self.json(&["pending", "--json"]);
            p.as_array().is_some_and(|a| a.len() == 1)
        });
        p[0].clone()
    }
}

fn ms(later: SystemTime, earlier: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

fn wall(secs: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A bot talking to a new fake, and a sandboxed curl of a new origin held on its question.
struct Held {
    fake: FakeTelegram,
    t: DaemonEnv,
    /// The origin's port.
    port: u16,
    /// The sandboxed curl ([`DaemonEnv::spawn_curl`]).
    curl: Child,
    /// The question's `sendMessage`.
    q: Call,
}

fn held_curl() -> Held {
    let fake = FakeTelegram::start();
    let t = DaemonEnv::with_bot(&fake, "");
    let port = origin();
    let curl = t.spawn_curl(port);
    let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
    Held { fake, t, port, curl, q }
}

/// Sandboxed client for the latency rounds: for each port, a request through the proxy (GET in
/// absolute form, or CONNECT then GET through the tunnel), timed with the wall clock just before
/// the request is sent and when the proxy's answer arrives. One line per round:
/// `round I KIND SENT RECEIVED STATUS`.
const CLIENT: &str = r#"
import os, socket, sys, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ.get("HTTP_PROXY", "http://127.0.0.1:3128"))
phost, pport = proxy.hostname, proxy.port
def head(s):
    data = b""
    while b"\r\n" not in data:
        c = s.recv(4096)
        if not c:
            break
        data += c
    return data
for i, port in enumerate(sys.argv[1:]):
    kind = "GET" if i % 2 == 0 else "CONNECT"
    s = socket.create_connection((phost, int(pport)), timeout=60)
    if kind == "GET":
        req = "GET http://127.0.0.1:%s/ HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n" % (port, port)
    else:
        req = "CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n" % (port, port)
    sent = time.time()
    s.sendall(req.encode())
    data = head(s)
    got = time.time()
    status = data.split(b" ")[1].decode() if data.count(b" ") else "none"
    if kind == "CONNECT" and status == "200":
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        body = b""
        while True:
            c = s.recv(4096)
            if not c:
                break
            body += c
        if not body.endswith(b"hello"):
            status = "tunnel-broken"
    s.close()
    print("round %d %s %.6f %.6f %s" % (i, kind, sent, got, status), flush=True)
"#;

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn a_button_releases_a_held_request_and_the_latencies_are_printed() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    // (a) curl's GET is held; the question reaches the chat with its context and buttons.
    let Held { fake, t, port, curl, q } = held_curl();
    let pending = t.pending_one();
    let sandbox = pending["sandbox"].as_str().unwrap().to_owned();
    let msg = text(&q.body).to_owned();
    for part in [
        format!("{sandbox} wants 127.0.0.1:{port}"),
        "GET /".to_owned(),
        "command: curl -sS".to_owned(),
        format!("cwd: {}", t.proj.display()),
        format!("question {}", pending["id"].as_str().unwrap()),
        "/allow 127.0.0.1".to_owned(),
    ] {
        assert!(msg.contains(&part), "{part:?} missing from the question:\n{msg}");
    }
    assert_eq!(q.body["chat_id"], CHAT);
    for label in ["Allow once", "This session", "1 hour", "Always", "Deny"] {
        button(&q.body, label);
    }
    let question_msg = q.message_id.unwrap();
    fake.push_callback(CHAT, "alice", question_msg, &button(&q.body, "Allow once"));
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    let ack = fake.wait_call("answerCallbackQuery", |_| true);
    assert!(text(&ack.body).contains("allowed once: 1 request released"), "{}", ack.body);
    let edit = fake.wait_call("editMessageText", |_| true);
    assert_eq!(edit.body["message_id"], question_msg);
    assert!(
        text(&edit.body).contains(&format!("127.0.0.1:{port} allowed once in Telegram by @alice")),
        "{}",
        edit.body
    );
    assert!(edit.body.get("reply_markup").is_none(), "buttons removed: {}", edit.body);
    // Once: nothing remembered.
    assert_eq!(t.json(&["rules", "--json"]), json!([]));

    // Latency: rounds of a sandboxed client (GET, CONNECT, ...), one question each.
    let ports: Vec<String> = (0..12).map(|_| origin().to_string()).collect();
    std::fs::write(t.proj.join("client.py"), CLIENT).unwrap();
    let mut args = vec!["python3", "client.py"];
    args.extend(ports.iter().map(String::as_str));
    let mut client = t.spawn_net(&[], &args);
    let rounds = lines_of(client.stdout.take().unwrap());
    let (mut post, mut release) = (Vec::new(), Vec::new());
    for (i, port) in ports.iter().enumerate() {
        let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}\n")));
        let msg_id = q.message_id.unwrap();
        let update = fake.push_callback(CHAT, "alice", msg_id, &button(&q.body, "Allow once"));
        let line = rounds.recv_timeout(Duration::from_secs(20)).expect("a round's line");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((f[0], f[1], f[5]), ("round", i.to_string().as_str(), "200"), "{line}");
        let (sent, got) = (wall(f[3].parse().unwrap()), wall(f[4].parse().unwrap()));
        let delivered = fake.delivered_wall(update).expect("the update was delivered");
        post.push(ms(q.wall, sent));
        release.push(ms(got, delivered));
        eprintln!(
            "round {i} ({}): blocked request -> question at the fake {:.2} ms; callback delivered -> response {:.2} ms",
            f[2], post[i], release[i]
        );
    }
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 0, "{stderr}");
    let (p, r) = (median(&post), median(&release));
    eprintln!("telegram e2e latency: blocked request -> question posted (ms): {post:.2?}");
    eprintln!(
        "telegram e2e latency: update delivered -> response in the sandbox (ms): {release:.2?}"
    );
    eprintln!("telegram e2e latency medians: post {p:.2} ms, release {r:.2} ms (target <= 50 ms)");
    // The 50 ms target is a benchmark's business (bench/telegram-latency.sh prints these
    // medians): a timing assertion here would fail on a loaded machine, not on a slow sandgate.
}

#[test]
fn an_allow_command_releases_the_held_request_and_rules_revoke_status_work() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Held { fake, t, curl, q, .. } = held_curl();
    let msg_id = q.message_id.unwrap();
    fake.push_message(CHAT, "bob", "/allow 127.0.0.1");
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    let reply =
        fake.wait_call("sendMessage", text_has("allowed for this session: 1 request released"));
    assert_eq!(reply.body["chat_id"], CHAT);
    let edit = fake.wait_call("editMessageText", |_| true);
    assert_eq!(edit.body["message_id"], msg_id);
    assert!(
        text(&edit.body).contains("allowed for this session in Telegram by @bob"),
        "{}",
        edit.body
    );

    // The answer is a grant recorded with who gave it and how: one for this session, over now
    // that the sandbox has ended (`rules --all` keeps it).
    assert_eq!(t.json(&["rules", "--json"]), json!([]));
    let rules = t.json(&["rules", "--all", "--json"]);
    let rules = rules.as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        (rules[0]["pattern"].as_str(), rules[0]["channel"].as_str()),
        (Some("127.0.0.1"), Some("telegram"))
    );
    assert_eq!(rules[0]["approved_by"], "@bob", "{}", rules[0]);
    assert_eq!(rules[0]["scope"], "session", "{}", rules[0]);

    // With nothing pending, /allow records a grant that outlives sandboxes.
    fake.push_message(CHAT, "bob", "/allow 127.0.0.1 global");
    fake.wait_call("sendMessage", text_has("no request was waiting"));
    let rules = t.json(&["rules", "--json"]);
    let rules = rules.as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["approved_by"], "@bob", "{}", rules[0]);
    // JSON says g12; people (and the bot) see #12.
    let id = rules[0]["id"].as_str().unwrap().trim_start_matches('g').to_owned();

    // /rules, /status and /revoke go to the daemon.
    fake.push_message(CHAT, "bob", "/rules");
    let r = fake.wait_call("sendMessage", text_has("by @bob via telegram"));
    assert!(text(&r.body).contains(&format!("#{id}")), "{}", r.body);
    assert!(text(&r.body).contains("allow 127.0.0.1"), "{}", r.body);
    fake.push_message(CHAT, "bob", "/status");
    let s = fake.wait_call("sendMessage", text_has("sandgate daemon up"));
    assert!(text(&s.body).contains("0 question(s) pending"), "{}", s.body);
    fake.push_message(CHAT, "bob", &format!("/revoke {id}"));
    fake.wait_call("sendMessage", text_has(&format!("revoked #{id}")));
    assert_eq!(t.json(&["rules", "--json"]), json!([]));
    fake.push_message(CHAT, "bob", "/revoke 999");
    fake.wait_call("sendMessage", text_has("not revoked"));
    fake.push_message(CHAT, "bob", "/rules");
    fake.wait_call("sendMessage", text_has("No grants."));
}

#[test]
fn strangers_are_ignored_and_logged_pending_lists_the_question_and_it_times_out() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    // The token comes from the environment, which wins over the file's.
    let mut t = DaemonEnv::telegram(&format!(
        "[daemon]\nask_timeout = \"4s\"\n\n[telegram]\ntoken = \"999:not-this-one\"\n\
         chats = [{CHAT}]\napi_url = \"{}\"\n",
        fake.url
    ));
    t.vars.push(("SANDGATE_TELEGRAM_TOKEN".into(), Some(TOKEN.into())));
    let port = origin();
    let asked = Instant::now();
    let curl = t.spawn_curl(port);
    let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
    let msg_id = q.message_id.unwrap();
    let pending = t.pending_one();

    // A stranger's command and button press, then our /pending: updates are handled in order,
    // so the reply to /pending proves the stranger's two were seen first.
    fake.push_message(STRANGER, "mallory", "/allow 127.0.0.1");
    fake.push_callback(STRANGER, "mallory", msg_id, &button(&q.body, "Always"));
    fake.push_message(CHAT, "alice", "/pending");
    let reply = fake.wait_call("sendMessage", text_has("pending:"));
    let listed = text(&reply.body);
    assert!(untagged(listed).starts_with("1 pending:"), "{listed}");
    assert!(
        listed.contains(&format!(
            "{} · {} wants 127.0.0.1:{port} · 1 waiting",
            pending["id"].as_str().unwrap(),
            pending["sandbox"].as_str().unwrap()
        )),
        "{listed}"
    );
    assert_eq!(t.json(&["pending", "--json"]).as_array().unwrap().len(), 1, "still held");
    for c in fake.calls("sendMessage").iter().chain(&fake.calls("answerCallbackQuery")) {
        assert_ne!(c.body["chat_id"], STRANGER, "the bot answered a stranger: {}", c.body);
    }
    assert!(fake.calls("answerCallbackQuery").is_empty());

    // Nobody answers: 403 after the timeout, and the question is edited to say so.
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "403\n"), "{stderr}");
    assert!(asked.elapsed() >= Duration::from_secs(4), "{:?}", asked.elapsed());
    let edit = fake.wait_call("editMessageText", |_| true);
    assert!(text(&edit.body).contains("nobody answered in time"), "{}", edit.body);
    assert_eq!(t.json(&["rules", "--json"]), json!([]));
    assert_eq!(fake.bad_token(), 0, "the file's token was not used");
    let log = t.log();
    assert!(log.contains("ignoring a Telegram message from a chat not configured"), "{log}");
    assert!(log.contains("ignoring a Telegram button press from a chat not configured"), "{log}");
    assert!(log.contains(&STRANGER.to_string()), "the stranger's chat id is logged:\n{log}");
    assert!(!log.contains(SECRET), "the token is in the log:\n{log}");
    // The token is the daemon's: the sandboxed command does not see it.
    let echo = ["sh", "-c", "echo ${SANDGATE_TELEGRAM_TOKEN:-unset}"];
    for tier in ["run", "net"] {
        let out = t.cmd().arg(tier).arg("--").args(echo).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout, "unset\n", "{tier}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn a_429_and_500s_are_survived_and_the_cli_answers_meanwhile() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    // The question's first post gets 429 (retry after 1 s), its second a 500; the first long
    // poll a 500 (teloxide waits 10 s after a 5xx before it reports the error).
    fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    fake.fail_next("sendMessage", Failure::ServerError);
    fake.fail_next("getUpdates", Failure::ServerError);
    let t = DaemonEnv::with_bot(&fake, "");
    let port = origin();
    let launched = SystemTime::now();
    let curl = t.spawn_curl(port);
    let pending = t.pending_one();
    let sandbox = pending["sandbox"].as_str().unwrap().to_owned();
    // While the bot is backing off, the CLI answers.
    fake.wait_nth("sendMessage", 2, Duration::from_secs(20), |_| true);
    let answered = Instant::now();
    let out = t.sg(&["allow", "127.0.0.1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(curl);
    let released = answered.elapsed();
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    assert!(
        released < Duration::from_secs(3),
        "the CLI's answer waited for Telegram: {released:?}"
    );
    eprintln!("released by the CLI {released:?} after the answer, while Telegram was failing");

    // The bot carries on: the question is posted once the failures pass, then edited.
    let posted = fake.wait_nth("sendMessage", 3, Duration::from_secs(30), |_| true);
    eprintln!(
        "question posted {:.0} ms after the launch, through 429 and 500",
        ms(posted.wall, launched)
    );
    assert!(
        text(&posted.body).contains(&format!("{sandbox} wants 127.0.0.1:{port}")),
        "{}",
        posted.body
    );
    let edit = fake.wait_nth("editMessageText", 1, Duration::from_secs(30), |_| true);
    assert!(text(&edit.body).contains("allowed for this session in the CLI by"), "{}", edit.body);
    // ...and its poller too: a new question is answered with a button.
    let polls = fake.calls("getUpdates").len();
    fake.wait_nth("getUpdates", polls + 1, Duration::from_secs(30), |_| true);
    let port2 = origin();
    let curl = t.spawn_curl(port2);
    let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port2}")));
    let msg_id = q.message_id.unwrap();
    fake.push_callback(CHAT, "alice", msg_id, &button(&q.body, "Allow once"));
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    let log = t.log();
    assert!(log.contains("Telegram call failed; retrying"), "{log}");
    assert!(log.contains("Telegram getUpdates failed; retrying"), "{log}");
    assert!(!log.contains(SECRET), "the token is in the log:\n{log}");
}

/// Runs `sandgate ARGS`, which must succeed, and returns how long it took.
fn timed(t: &DaemonEnv, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = t.sg(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    start.elapsed()
}

/// At most four questions are posted at once. A fifth answered (from the CLI) while it waits for
/// its turn is never posted: there is nothing left to ask.
#[test]
fn a_question_answered_before_its_turn_to_be_posted_is_not_posted() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    fake.hold("sendMessage", None);
    let t = DaemonEnv::with_bot(&fake, "request_timeout = \"30s\"\n");
    let ports: Vec<u16> = (0..4).map(|_| origin()).collect();
    let curls: Vec<Child> = ports.iter().map(|&p| t.spawn_curl(p)).collect();
    wait_until("four posts hanging", Duration::from_secs(20), || fake.held("sendMessage") >= 4);
    let fifth = origin();
    let curl5 = t.spawn_curl(fifth);
    let mut q5 = Value::Null;
    wait_until("the fifth question", Duration::from_secs(20), || {
        let pending = t.json(&["pending", "--json"]);
        let found = pending.as_array().into_iter().flatten().find(|q| q["port"] == fifth);
        q5 = found.cloned().unwrap_or(Value::Null);
        !q5.is_null()
    });
    let out = t.sg(&["allow", q5["id"].as_str().unwrap(), "--once"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(curl5);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    // The first four are answered too, the API comes back: their posts go through and are edited.
    let out = t.sg(&["allow", "127.0.0.1", "--once"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for c in curls {
        let (code, stdout, stderr) = finish(c);
        assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    }
    fake.release("sendMessage");
    for p in &ports {
        fake.wait_call("editMessageText", text_has(&format!("127.0.0.1:{p} ")));
    }
    let posted5 = fake
        .calls("sendMessage")
        .iter()
        .any(|c| text(&c.body).contains(&format!("127.0.0.1:{fifth}")));
    assert!(!posted5, "the question answered before its turn was posted");
}

#[test]
fn a_hanging_send_message_holds_up_neither_the_cli_nor_other_questions() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    // Every sendMessage hangs until released; the bot abandons a call after 2 s and retries.
    fake.hold("sendMessage", None);
    let t = DaemonEnv::with_bot(&fake, "request_timeout = \"2s\"\n");
    let port = origin();
    let curl = t.spawn_curl(port);
    let first = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
    let q = t.pending_one();

    // (a) The daemon answers at once, and the CLI's answer releases the request at once.
    let (status, pending) = (timed(&t, &["status"]), timed(&t, &["pending"]));
    let answered = Instant::now();
    timed(&t, &["allow", q["id"].as_str().unwrap(), "--once"]);
    let (code, stdout, stderr) = finish(curl);
    let released = answered.elapsed();
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    eprintln!(
        "while sendMessage hangs: status {status:.0?}, pending {pending:.0?}, \
         CLI answer -> request released {released:.0?}"
    );
    for (what, took) in [("status", status), ("pending", pending), ("release", released)] {
        assert!(took < Duration::from_secs(2), "{what} waited for Telegram: {took:?}");
    }

    // A second question is posted at once, not after the first's retries.
    let port2 = origin();
    let asked2 = SystemTime::now();
    let curl2 = t.spawn_curl(port2);
    let second = fake.wait_nth(
        "sendMessage",
        1,
        Duration::from_secs(10),
        text_has(&format!("127.0.0.1:{port2}")),
    );
    let second_after = ms(second.wall, asked2);
    // The hanging call is abandoned after request_timeout and tried again.
    let retry = fake.wait_nth(
        "sendMessage",
        2,
        Duration::from_secs(10),
        text_has(&format!("127.0.0.1:{port}")),
    );
    let retry_after = ms(retry.wall, first.wall);
    eprintln!(
        "while the first question's post hangs: a second question reaches the API {second_after:.0} ms \
         after its launch; the hanging call is retried {retry_after:.0} ms after it was sent"
    );
    assert!(
        second_after < 2000.0,
        "the second question waited for the first: {second_after:.0} ms"
    );
    assert!((2000.0..6000.0).contains(&retry_after), "retried after {retry_after:.0} ms");
    assert!(fake.held("sendMessage") >= 1);
    timed(&t, &["status"]);

    // (b) The API answers again: the first question is posted late and edited to say who
    // answered; the second is answered with its button.
    let recovered = SystemTime::now();
    fake.release("sendMessage");
    let edit = fake.wait_call("editMessageText", text_has(&format!("127.0.0.1:{port} ")));
    let edited_after = ms(edit.wall, recovered);
    assert!(text(&edit.body).contains("allowed once in the CLI by"), "{}", edit.body);
    let ids: Vec<i64> = fake
        .calls("sendMessage")
        .iter()
        .filter(|c| text(&c.body).contains(&format!("127.0.0.1:{port}\n")))
        .filter_map(|c| c.message_id)
        .collect();
    assert!(ids.contains(&edit.body["message_id"].as_i64().unwrap()), "{ids:?} {}", edit.body);
    let q2 = fake
        .calls("sendMessage")
        .into_iter()
        .rfind(|c| text(&c.body).contains(&format!("127.0.0.1:{port2}")))
        .unwrap();
    fake.push_callback(CHAT, "alice", q2.message_id.unwrap(), &button(&q2.body, "Allow once"));
    let (code, stdout, stderr) = finish(curl2);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    fake.wait_call(
        "editMessageText",
        text_has(&format!("127.0.0.1:{port2} allowed once in Telegram by @alice")),
    );

    // A new question after the recovery is posted promptly, and the host form answers it.
    let port3 = origin();
    let asked3 = SystemTime::now();
    let curl3 = t.spawn_curl(port3);
    let third = fake.wait_nth(
        "sendMessage",
        1,
        Duration::from_secs(10),
        text_has(&format!("127.0.0.1:{port3}")),
    );
    let third_after = ms(third.wall, asked3);
    timed(&t, &["allow", "127.0.0.1", "--once"]);
    let (code, stdout, stderr) = finish(curl3);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    eprintln!(
        "after the API recovers: the late question is edited {edited_after:.0} ms after the release; \
         a new question reaches the API {third_after:.0} ms after its launch"
    );
    assert!(third_after < 2000.0, "{third_after:.0} ms");
    let log = t.log();
    assert!(log.contains("no answer within 2s"), "{log}");
    assert!(!log.contains(SECRET), "the token is in the log:\n{log}");
}

#[test]
fn a_hanging_long_poll_does_not_stop_questions_being_posted() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    let t = DaemonEnv::with_bot(&fake, "");
    assert!(t.sg(&["rules"]).status.success(), "the daemon starts");
    fake.hold("getUpdates", None);
    wait_until("a held getUpdates", Duration::from_secs(10), || fake.held("getUpdates") == 1);
    let port = origin();
    let asked = SystemTime::now();
    let curl = t.spawn_curl(port);
    let q = fake.wait_nth(
        "sendMessage",
        1,
        Duration::from_secs(10),
        text_has(&format!("127.0.0.1:{port}")),
    );
    let posted = ms(q.wall, asked);
    assert_eq!(fake.held("getUpdates"), 1, "the long poll still hangs");
    eprintln!("while getUpdates hangs: a question reaches the API {posted:.0} ms after its launch");
    assert!(posted < 2000.0, "{posted:.0} ms");
    // The poll answers again: the button works.
    fake.release("getUpdates");
    fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &button(&q.body, "Allow once"));
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
}

#[test]
fn an_answer_from_the_cli_edits_the_question_in_the_chat() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Held { fake, t, port, curl, q: posted } = held_curl();
    let msg_id = posted.message_id.unwrap();
    let q = t.pending_one();
    let answered = SystemTime::now();
    let out = t.sg(&["allow", q["id"].as_str().unwrap(), "--for", "15m"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    let edit = fake.wait_call("editMessageText", |_| true);
    eprintln!("CLI answer -> question edited in the chat: {:.2} ms", ms(edit.wall, answered));
    assert_eq!(
        (edit.body["chat_id"].as_i64(), edit.body["message_id"].as_i64()),
        (Some(CHAT), Some(msg_id))
    );
    let who = String::from_utf8_lossy(&Command::new("id").arg("-un").output().unwrap().stdout)
        .trim()
        .to_owned();
    let want = format!("✅ 127.0.0.1:{port} allowed for 15m in the CLI by {who}");
    let edited = untagged(text(&edit.body));
    assert!(edited.starts_with(&want), "{edited:?} is not {want:?}…");
    // Every message names the machine (no `[telegram] name` here: the daemon's user@host).
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let machine = format!("[{who}@{}] ", host.trim().split('.').next().unwrap());
    for body in [&edit.body, &posted.body] {
        assert!(text(body).starts_with(&machine), "{:?} does not start {machine:?}", text(body));
    }
    assert!(edit.body.get("reply_markup").is_none(), "buttons removed: {}", edit.body);
}

/// A burst of blocked direct connections, counted by the daemon's monitor.
// UDP: a direct datagram is refused and reported by the sandbox's firewall (TCP would be
// captured into the proxy instead).
const BURST: &str = r#"
import socket
refused = 0
for i in range(1000):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", ("10.203.0.2", 9))
    except OSError:
        refused += 1
    finally:
        s.close()
print("refused", refused, flush=True)
"#;

#[test]
fn an_alert_burst_of_1000_blocked_connections_is_a_handful_of_messages_with_counts() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    let t = DaemonEnv::with_bot(&fake, "alert_window = \"2s\"\n");
    // 10.203.0.2 is nobody: the sandbox's own firewall rejects the datagrams inside its
    // namespace.
    let (code, stdout, stderr) = finish(t.spawn_net(&[], &["python3", "-c", BURST]));
    assert_eq!((code, stdout.as_str()), (0, "refused 1000\n"), "{stderr}");
    let dest = "10.203.0.2:9/udp";
    // The first alert at once, then one summary per window with the count.
    let count = |bodies: &[Value]| -> u64 {
        bodies
            .iter()
            .map(|b| {
                let t = text(b);
                if let Some((_, more)) = t.split_once(" — ") {
                    more.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
                } else if let Some((_, x)) = t.rsplit_once("(×") {
                    x.trim_end_matches(')').parse().unwrap_or(0)
                } else {
                    1
                }
            })
            .sum()
    };
    let mut alerts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        alerts = fake.sent_containing(dest);
        if count(&alerts) >= 1000 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let texts: Vec<&str> = alerts.iter().map(text).collect();
    eprintln!("1000 blocked connections -> {} alert message(s): {texts:#?}", alerts.len());
    assert!(!alerts.is_empty() && alerts.len() <= 5, "{texts:#?}");
    assert!(texts[0].contains("blocked direct connection to 10.203.0.2:9/udp"), "{texts:#?}");
    assert_eq!(count(&alerts), 1000, "every blocked packet is counted: {texts:#?}");
}

#[test]
fn a_blocked_connection_just_before_the_sandbox_ends_is_alerted() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let fake = FakeTelegram::start();
    let t = DaemonEnv::with_bot(&fake, "");
    // One refused connection, and the sandbox ends at once: the packet may be in the kernel's
    // last NFLOG batch, which arrives after the launcher unregistered.
    let one = "import socket\n\
               try:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('10.203.0.3', 53))\n\
               except OSError:\n    print('refused')\n";
    let (code, stdout, stderr) = finish(t.spawn_net(&[], &["python3", "-c", one]));
    assert_eq!((code, stdout.as_str()), (0, "refused\n"), "{stderr}");
    let alert = fake.wait_call("sendMessage", text_has("10.203.0.3:53/udp"));
    assert!(text(&alert.body).contains("blocked direct connection"), "{}", alert.body);
}

/// A sandboxed `sh -c` that requests `http://127.0.0.1:PORT/` (printing the status code), waits
/// for the file `again` in the project, and requests it again.
fn twice(port: u16) -> String {
    let curl = format!(
        "curl -sS --max-time 40 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' \
         http://127.0.0.1:{port}/"
    );
    format!("{curl}; while [ ! -e again ]; do sleep 0.02; done; {curl}")
}

#[test]
fn a_deny_command_releases_the_held_request_with_a_403() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Held { fake, t, curl, q, .. } = held_curl();
    fake.push_message(CHAT, "bob", "/deny 127.0.0.1");
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "403\n"), "{stderr}");
    // The reply names the rule stored (issue 32: it once said "released" while the grant had
    // failed, for want of the sandbox's row, and `rules` below then listed nothing).
    let reply = fake.wait_call("sendMessage", text_has("denied for this session: 1 request"));
    assert!(text(&reply.body).ends_with("1 request released · rule #1"), "{}", reply.body);
    let edit = fake.wait_call("editMessageText", |_| true);
    assert_eq!(edit.body["message_id"], q.message_id.unwrap());
    assert!(
        text(&edit.body).contains("denied for this session in Telegram by @bob"),
        "{}",
        edit.body
    );
    // Acknowledged (the request released, the reply, the edit), so stored: read at once.
    let rules = t.json(&["rules", "--all", "--json"]);
    assert_eq!((&rules[0]["effect"], &rules[0]["channel"]), (&json!("deny"), &json!("telegram")));
}

#[test]
fn the_hour_always_and_deny_buttons_do_what_the_readme_says() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    // (button, status of the held and of the later request, effect, scope, target kind)
    let rows = [
        ("1 hour", "200", "allow", "until", "project"),
        ("Always", "200", "allow", "always", "project"),
        ("Deny", "403", "deny", "session", "sandbox"),
    ];
    for (label, status, effect, scope, target) in rows {
        let fake = FakeTelegram::start();
        let t = DaemonEnv::with_bot(&fake, "");
        let port = origin();
        let run = t.spawn_net(&[], &["sh", "-c", &twice(port)]);
        let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
        let pressed = SystemTime::now();
        fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &button(&q.body, label));
        let ack = fake.wait_call("answerCallbackQuery", |_| true);
        assert!(text(&ack.body).ends_with("1 request released · rule #1"), "{label}: {}", ack.body);

        // The grant, while the sandbox still runs (a session grant ends with it).
        let rules = t.json(&["rules", "--json"]);
        let rules = rules.as_array().unwrap();
        assert_eq!(rules.len(), 1, "{label}: {rules:#?}");
        let g = &rules[0];
        assert_eq!((g["effect"].as_str(), g["channel"].as_str()), (Some(effect), Some("telegram")));
        assert_eq!(g["approved_by"], "@alice", "{label}: {g:#}");
        assert!(g["target"][target].is_string(), "{label}: {g:#}");
        match scope {
            "until" => {
                let (created, until) =
                    (g["created"].as_i64().unwrap(), g["scope"]["until"].as_i64());
                assert_eq!(until.map(|u| u - created), Some(3_600_000), "{label}: {g:#}");
                let lag = created
                    - pressed.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64;
                assert!(
                    (-1000..10_000).contains(&lag),
                    "{label}: created {lag} ms after the press"
                );
            }
            s => assert_eq!(g["scope"], s, "{label}: {g:#}"),
        }

        // The later request in the same sandbox: the same result, and no new question.
        std::fs::write(t.proj.join("again"), "").unwrap();
        let (code, stdout, stderr) = finish(run);
        assert_eq!((code, stdout), (0, format!("{status}\n{status}\n")), "{label}: {stderr}");
        assert_eq!(
            fake.sent_containing(&format!("127.0.0.1:{port}")).len(),
            1,
            "{label}: asked again"
        );
        assert_eq!(t.json(&["pending", "--json"]), json!([]), "{label}");
    }
}

#[test]
fn a_button_pressed_after_a_cli_answer_is_told_it_was_already_answered() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Held { fake, t, curl, q, .. } = held_curl();
    let id = t.pending_one()["id"].as_str().unwrap().to_owned();
    let out = t.sg(&["allow", &id, "--once"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(curl);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    // The button press loses: it is told so, and changes nothing.
    fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &button(&q.body, "Always"));
    let ack = fake.wait_call("answerCallbackQuery", |_| true);
    let said = text(&ack.body);
    assert!(said.contains(&format!("{id} was already allowed once in the CLI by")), "{said}");
    assert_eq!(t.json(&["rules", "--json"]), json!([]));
}

#[test]
fn a_telegram_answer_is_shown_in_watch_and_on_the_launchers_terminal() {
    if skip_unless(can_sandbox() && has_script(), "root, curl, python3 and script (util-linux)") {
        return;
    }
    let fake = FakeTelegram::start();
    let t = DaemonEnv::with_bot(&fake, "");
    assert!(t.sg(&["rules"]).status.success(), "the daemon starts");
    let mut json = t.cmd().args(["watch", "--json"]).stdout(Stdio::piped()).spawn().unwrap();
    let events = lines_of(json.stdout.take().unwrap());
    let mut watch = t.on_terminal(&["watch"]);
    let watch_screen = lines_of(watch.stdout.take().unwrap());
    let mut keys = watch.stdin.take().unwrap();
    // The launcher on a terminal; its command outlives the answer (it waits for `done`).
    let port = origin();
    let script = format!(
        "curl -sS --max-time 40 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' \
         http://127.0.0.1:{port}/; while [ ! -e done ]; do sleep 0.02; done"
    );
    let mut run = t.on_terminal(&["net", "--", "sh", "-c", &script]);
    let _keep_stdin_open = run.stdin.take();
    let screen = lines_of(run.stdout.take().unwrap());
    let q = fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
    fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &button(&q.body, "This session"));

    let said = format!("127.0.0.1:{port} allowed for this session in Telegram by @alice");
    let wait = Duration::from_secs(10);
    let line = |rx: &mpsc::Receiver<String>, what: &str| {
        let deadline = Instant::now() + wait;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(&said) => return l,
                Ok(l) => seen.push(l),
                Err(e) => panic!("{what}: {said:?} not seen ({e}); saw {seen:#?}"),
            }
        }
    };
    line(&screen, "the launcher's terminal");
    line(&watch_screen, "sandgate watch");
    let answered = loop {
        let l = events.recv_timeout(wait).expect("an answered event in watch --json");
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["event"] == "answered" {
            break v;
        }
    };
    assert_eq!(answered["by"], json!({ "channel": "telegram", "who": "@alice" }), "{answered:#}");
    assert_eq!(answered["question"]["port"], port, "{answered:#}");
    std::fs::write(t.proj.join("done"), "").unwrap();
    wait_until("the launcher to exit", wait, || run.try_wait().unwrap().is_some());
    keys.write_all(b"q").unwrap();
    let _ = keys.flush();
    wait_until("watch to quit", wait, || watch.try_wait().unwrap().is_some());
    let _ = json.kill();
    let _ = json.wait();
}

/// Issue 14: question ids restart at q1 with each daemon, and a button from before a restart
/// answered the new q1 (another host). Now it is told the question is gone and answers nothing.
#[test]
fn a_button_from_before_a_daemon_restart_answers_nothing() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Held { fake, t, curl, q, .. } = held_curl();
    let old = t.pending_one();
    let stale = button(&q.body, "Always");
    let out = t.sg(&["stop"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, stdout, _) = finish(curl);
    assert_eq!(stdout, "403\n", "a stopping daemon denies what is pending");
    // A new daemon (the next launch starts it): its first question is q1 again.
    let port = origin();
    let curl = t.spawn_curl(port);
    let new = t.pending_one();
    assert_eq!(new["id"], old["id"], "ids restart with the daemon");
    fake.wait_call("sendMessage", text_has(&format!("127.0.0.1:{port}")));
    fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &stale);
    let ack = fake.wait_call("answerCallbackQuery", |_| true);
    assert!(text(&ack.body).contains("no longer pending"), "{}", ack.body);
    assert_eq!(t.json(&["pending", "--json"]).as_array().map(Vec::len), Some(1));
    assert_eq!(t.json(&["rules", "--json"]), json!([]), "nothing was granted");
    // This bot's token is in config.toml: each daemon said so once, at its start.
    let log = t.log();
    let warned = log.matches("token is written in the config file").count();
    assert!((1..=2).contains(&warned), "{warned} warnings in:\n{log}");
    assert!(!log.contains(TOKEN), "the token itself is never logged");
    let out = t.sg(&["deny", new["id"].as_str().unwrap(), "--once"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(finish(curl).1, "403\n");
}
