//! A fake Telegram Bot API server on 127.0.0.1:0, shared by the bot's own tests (async, in
//! `sandgate-approvals`) and the end-to-end tests of the daemon's bot (`sandgate-tests`).
//!
//! `getUpdates` is long-polled and fed by the test ([`FakeTelegram::push_message`],
//! [`FakeTelegram::push_callback`]); every call is recorded with its arrival time; failures are
//! scripted per method ([`Failure`]) and answers can be held back ([`FakeTelegram::hold`]).
//! Requests whose path does not carry the token are answered 404 and counted
//! ([`FakeTelegram::bad_token`]).
//!
//! Why threads, not tokio: the end-to-end tests are synchronous. The async tests wait through
//! [`FakeTelegram::wait_nth_async`], woken by the server's own notifications (never a sleep).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::Notify;

/// The token the fake accepts unless told otherwise ([`FakeTelegram::start_with`]).
pub const TOKEN: &str = "123456:TEST-token";

/// One call the bot made.
#[derive(Debug, Clone)]
pub struct Call {
    /// Method name, first letter lowercased (`SendMessage` → `sendMessage`).
    pub method: String,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
    /// When the request was read completely (monotonic clock).
    pub at: Instant,
    /// The same moment on the wall clock (to compare with times other processes print).
    pub wall: SystemTime,
    /// The id of the message a successful `sendMessage` created.
    pub message_id: Option<i64>,
}

/// A scripted failure for the next call of a method.
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    /// HTTP 429 with `parameters.retry_after`.
    TooManyRequests {
        /// Seconds the bot is told to wait.
        retry_after: u32,
    },
    /// HTTP 500 with an HTML body.
    ServerError,
    /// HTTP 200 with a body that is not JSON.
    Garbage,
    /// No answer at all until the fake is dropped, as from a server that hangs.
    Hang,
}

/// What the fake Bot API server has recorded and will answer: queued updates, ids, the calls it
/// received and the failures it was told to return.
#[derive(Default)]
struct ServerState {
    updates: Vec<Value>,
    next_update_id: u64,
    next_message_id: i64,
    calls: Vec<Call>,
    bad_token: usize,
    failures: VecDeque<(String, Failure)>,
    /// When each update was first written into a `getUpdates` response.
    delivered: Vec<(u64, Instant, SystemTime)>,
    /// Methods whose calls are not answered while they are here: until released (`None`) or
    /// until the instant passes.
    holds: Vec<(String, Option<Instant>)>,
    /// Calls being held now, by method.
    held: Vec<String>,
    /// Set on drop: hung and held calls give up.
    closed: bool,
}

struct State {
    inner: Mutex<ServerState>,
    /// Wakes the server's own waits and the blocking waits of tests.
    changed: Condvar,
    /// Wakes the async waits of tests.
    changed_async: Notify,
    token: String,
    /// The bot's `@username` (without `@`), as `getMe` tells it.
    username: String,
    long_poll: Duration,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self) {
        self.changed.notify_all();
        self.changed_async.notify_waiters();
    }
}

/// The running fake. Dropping it makes hung and held calls give up.
pub struct FakeTelegram {
    /// `http://127.0.0.1:PORT`, for `[telegram] api_url` / `TelegramConfig::api_url`.
    pub url: String,
    state: Arc<State>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.state.lock().closed = true;
        self.state.notify();
    }
}

/// A Bot API `User`.
pub fn user(id: i64, username: &str) -> Value {
    json!({ "id": id, "is_bot": false, "first_name": username, "username": username })
}

/// The bot of `token` as the Bot API describes it in messages: its id is the digits before `:`.
pub fn bot_user(token: &str, username: &str) -> Value {
    let id: i64 = token.split(':').next().and_then(|id| id.parse().ok()).unwrap_or(0);
    json!({ "id": id, "is_bot": true, "first_name": username, "username": username })
}

/// A Bot API `Message` with `text` in a private chat.
pub fn message_json(id: i64, chat: i64, text: &str) -> Value {
    json!({
        "message_id": id,
        "date": 1_700_000_000,
        "chat": { "id": chat, "type": "private", "first_name": "chat" },
        "text": text,
    })
}

/// A Bot API `Message` with `text` in a group chat.
pub fn group_message(id: i64, chat: i64, text: &str) -> Value {
    json!({
        "message_id": id,
        "date": 1_700_000_000,
        "chat": { "id": chat, "type": "supergroup", "title": "team" },
        "text": text,
    })
}

/// The `text` of a call's body (`""` when absent).
pub fn text(body: &Value) -> &str {
    body["text"].as_str().unwrap_or("")
}

impl FakeTelegram {
    /// Accepts [`TOKEN`]; a `getUpdates` waits for an update up to the bot's own timeout.
    pub fn start() -> FakeTelegram {
        FakeTelegram::start_with(TOKEN, Duration::from_secs(3600))
    }

    /// Accepts `token`; a `getUpdates` waits at most `long_poll` (or the bot's own timeout, if
    /// shorter). A thread per connection (HTTP/1.1 with keep-alive).
    pub fn start_with(token: &str, long_poll: Duration) -> FakeTelegram {
        FakeTelegram::start_bot(token, "sandgate_test_bot", long_poll)
    }

    /// [`FakeTelegram::start_with`] for a bot whose `@username` is `username`: one fake is one
    /// bot's view of Telegram (its own updates), so two bots in one group chat are two fakes fed
    /// the same group messages ([`FakeTelegram::push_group_message`]).
    pub fn start_bot(token: &str, username: &str, long_poll: Duration) -> FakeTelegram {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local_addr"));
        let state = Arc::new(State {
            inner: Mutex::default(),
            changed: Condvar::new(),
            changed_async: Notify::new(),
            token: token.to_owned(),
            username: username.to_owned(),
            long_poll,
        });
        let st = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let st = st.clone();
                std::thread::spawn(move || connection(&st, stream));
            }
        });
        FakeTelegram { url, state }
    }

    /// Queues an update (the `update_id` is assigned); returns its id.
    pub fn push_update(&self, mut update: Value) -> u64 {
        let id = {
            let mut inner = self.state.lock();
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            update["update_id"] = json!(id);
            inner.updates.push(update);
            id
        };
        self.state.notify();
        id
    }

    /// A text message from `from` in `chat`.
    pub fn push_message(&self, chat: i64, from: &str, text: &str) -> u64 {
        let mut m = message_json(9000, chat, text);
        m["from"] = user(chat, from);
        self.push_update(json!({ "message": m }))
    }

    /// A press of the button with `data` under message `message_id` (this bot's) in `chat`.
    pub fn push_callback(&self, chat: i64, from: &str, message_id: i64, data: &str) -> u64 {
        let mut message = message_json(message_id, chat, "question");
        message["from"] = self.bot();
        self.push_update(json!({
            "callback_query": {
                "id": format!("cb{message_id}-{data}"),
                "from": user(chat, from),
                "chat_instance": "1",
                "message": message,
                "data": data,
            }
        }))
    }

    /// This fake's bot, as messages name it.
    pub fn bot(&self) -> Value {
        bot_user(&self.state.token, &self.state.username)
    }

    /// A text message from user `from_id` (`@from`) in group chat `chat`; with `reply_to`, a
    /// reply to message `reply_to.0` that bot `reply_to.1` posted.
    pub fn push_group_message(
        &self,
        chat: i64,
        (from_id, from): (i64, &str),
        text: &str,
        reply_to: Option<(i64, Value)>,
    ) -> u64 {
        let mut m = group_message(9000, chat, text);
        m["from"] = user(from_id, from);
        if let Some((id, poster)) = reply_to {
            let mut original = group_message(id, chat, "question");
            original["from"] = poster;
            m["reply_to_message"] = original;
        }
        self.push_update(json!({ "message": m }))
    }

    /// A press by user `from_id` (`@from`) of the button with `data` under message
    /// `message_id`, posted by `poster` (a [`bot_user`]), in group chat `chat`.
    pub fn push_group_callback(
        &self,
        chat: i64,
        (from_id, from): (i64, &str),
        (message_id, poster): (i64, Value),
        data: &str,
    ) -> u64 {
        let mut message = group_message(message_id, chat, "question");
        message["from"] = poster;
        self.push_update(json!({
            "callback_query": {
                "id": format!("cb{message_id}-{data}-{from_id}"),
                "from": user(from_id, from),
                "chat_instance": "1",
                "message": message,
                "data": data,
            }
        }))
    }

    /// Fails the next call of `method` (failures of one method are used in order).
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.state.lock().failures.push_back((method.to_owned(), failure));
    }

    /// Holds back the answers to `method`'s calls (each arriving one waits) until
    /// [`FakeTelegram::release`] or, with `for_at_most`, until that much time has passed.
    pub fn hold(&self, method: &str, for_at_most: Option<Duration>) {
        let until = for_at_most.map(|d| Instant::now() + d);
        self.state.lock().holds.push((method.to_owned(), until));
    }

    /// Answers the held calls of `method`, and the later ones at once.
    pub fn release(&self, method: &str) {
        self.state.lock().holds.retain(|(m, _)| m != method);
        self.state.notify();
    }

    /// How many calls of `method` are being held now.
    pub fn held(&self, method: &str) -> usize {
        self.state.lock().held.iter().filter(|m| *m == method).count()
    }

    /// How many requests came with a path that did not carry the token.
    pub fn bad_token(&self) -> usize {
        self.state.lock().bad_token
    }

    /// The calls of `method` so far.
    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.state.lock().calls.iter().filter(|c| c.method == method).cloned().collect()
    }

    /// When update `update` was first delivered by `getUpdates` (monotonic clock).
    pub fn delivered_at(&self, update: u64) -> Option<Instant> {
        self.state.lock().delivered.iter().find(|d| d.0 == update).map(|d| d.1)
    }

    /// When update `update` was first delivered by `getUpdates` (wall clock).
    pub fn delivered_wall(&self, update: u64) -> Option<SystemTime> {
        self.state.lock().delivered.iter().find(|d| d.0 == update).map(|d| d.2)
    }

    /// The last ten calls other than `getUpdates`, as `method body` lines (for failure messages).
    pub fn summary(&self) -> Vec<String> {
        summary(&self.state.lock())
    }

    /// Waits (blocking) for the `n`-th call (1-based) of `method` whose body matches `pred`;
    /// panics with the calls seen after `timeout`.
    #[track_caller]
    pub fn wait_nth(
        &self,
        method: &str,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Call {
        let deadline = Instant::now() + timeout;
        let mut inner = self.state.lock();
        loop {
            if let Some(c) = nth(&inner, method, n, &pred) {
                return c;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {method} call #{n} matching within {timeout:?}; calls: {:#?}",
                summary(&inner)
            );
            inner =
                self.state.changed.wait_timeout(inner, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Waits (blocking, up to 20 s) for the first call of `method` whose body matches `pred`.
    #[track_caller]
    pub fn wait_call(&self, method: &str, pred: impl Fn(&Value) -> bool) -> Call {
        self.wait_nth(method, 1, Duration::from_secs(20), pred)
    }

    /// The `sendMessage` bodies that contain `needle`.
    pub fn sent_containing(&self, needle: &str) -> Vec<Value> {
        self.calls("sendMessage")
            .into_iter()
            .map(|c| c.body)
            .filter(|b| text(b).contains(needle))
            .collect()
    }

    /// [`FakeTelegram::wait_nth`] for async tests: waits on the server's notifications without
    /// blocking the runtime (the bot under test may run on the same thread).
    pub async fn wait_nth_async(
        &self,
        method: &str,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Call {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.state.changed_async.notified();
            tokio::pin!(notified);
            // Registered before the look, so a call recorded in between still wakes us.
            notified.as_mut().enable();
            {
                let inner = self.state.lock();
                if let Some(c) = nth(&inner, method, n, &pred) {
                    return c;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(
                    !left.is_zero(),
                    "no {method} call #{n} matching within {timeout:?}; calls: {:#?}",
                    summary(&inner)
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = tokio::time::timeout(left, notified).await;
        }
    }
}

fn nth(
    inner: &ServerState,
    method: &str,
    n: usize,
    pred: &impl Fn(&Value) -> bool,
) -> Option<Call> {
    inner.calls.iter().filter(|c| c.method == method && pred(&c.body)).nth(n - 1).cloned()
}

fn summary(inner: &ServerState) -> Vec<String> {
    let calls: Vec<String> = inner
        .calls
        .iter()
        .filter(|c| c.method != "getUpdates")
        .map(|c| format!("{} {}", c.method, c.body))
        .collect();
    calls[calls.len().saturating_sub(10)..].to_vec()
}

/// Serves one connection: requests with a Content-Length body, answered in order.
fn connection(st: &State, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut out) = stream.try_clone() else { return };
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut len = 0usize;
        let mut close = false;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "content-length" {
                    len = v.parse().unwrap_or(0);
                } else if k == "connection" && v.eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let Some((status, reply)) = handle(st, &path, body) else { return };
        // One write: a head and a body in two segments would meet Nagle and delayed ACKs.
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if out.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// The answer to one request; `None` = never answer (a hung server, until the fake is dropped).
fn handle(st: &State, path: &str, body: Value) -> Option<(&'static str, String)> {
    // `/bot<TOKEN>/SendMessage`: method names are case-insensitive (teloxide sends `SendMessage`).
    let Some(method) = path.strip_prefix(&format!("/bot{}/", st.token)) else {
        st.lock().bad_token += 1;
        st.notify();
        let reply = json!({ "ok": false, "error_code": 404, "description": "Not Found" });
        return Some(("404 Not Found", reply.to_string()));
    };
    let mut m: String = method.chars().take(1).flat_map(char::to_lowercase).collect();
    m.push_str(method.get(1..).unwrap_or(""));
    let (failure, new_id) = {
        let mut inner = st.lock();
        let pos = inner.failures.iter().position(|(f, _)| *f == m);
        let failure = pos.and_then(|p| inner.failures.remove(p)).map(|(_, f)| f);
        let new_id = (failure.is_none() && m == "sendMessage").then(|| {
            inner.next_message_id += 1;
            inner.next_message_id
        });
        let (at, wall) = (Instant::now(), SystemTime::now());
        inner.calls.push(Call {
            method: m.clone(),
            body: body.clone(),
            at,
            wall,
            message_id: new_id,
        });
        (failure, new_id)
    };
    st.notify();
    hold(st, &m);
    match failure {
        Some(Failure::TooManyRequests { retry_after }) => {
            let reply = json!({
                "ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {retry_after}"),
                "parameters": { "retry_after": retry_after },
            });
            return Some(("429 Too Many Requests", reply.to_string()));
        }
        Some(Failure::ServerError) => {
            let reply = "<html>500 Internal Server Error</html>".to_owned();
            return Some(("500 Internal Server Error", reply));
        }
        Some(Failure::Garbage) => return Some(("200 OK", "\u{0}not json at all{".to_owned())),
        Some(Failure::Hang) => {
            let mut inner = st.lock();
            while !inner.closed {
                inner = st.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
            }
            return None;
        }
        None => {}
    }
    let result = match m.as_str() {
        "getUpdates" => get_updates(st, &body),
        "sendMessage" | "editMessageText" => {
            let id = new_id.or(body["message_id"].as_i64()).unwrap_or(0);
            message_json(id, body["chat_id"].as_i64().unwrap_or(0), text(&body))
        }
        "getMe" => {
            // As the Bot API describes a bot (`User` with the bot's own fields).
            let mut me = bot_user(&st.token, &st.username);
            for field in
                ["can_join_groups", "can_read_all_group_messages", "supports_inline_queries"]
            {
                me[field] = json!(false);
            }
            me["has_main_web_app"] = json!(false);
            me
        }
        _ => json!(true),
    };
    Some(("200 OK", json!({ "ok": true, "result": result }).to_string()))
}

/// Waits while `method` is held (see [`FakeTelegram::hold`]).
fn hold(st: &State, method: &str) {
    let mut inner = st.lock();
    let mut counted = false;
    loop {
        let now = Instant::now();
        let held =
            inner.holds.iter().any(|(m, until)| m == method && until.is_none_or(|u| u > now));
        if !held || inner.closed {
            break;
        }
        if !counted {
            inner.held.push(method.to_owned());
            counted = true;
            st.notify();
        }
        // Woken by a release; the timeout catches an `until` passing.
        let tick = Duration::from_millis(50);
        inner = st.changed.wait_timeout(inner, tick).unwrap_or_else(|e| e.into_inner()).0;
    }
    if counted {
        let at = inner.held.iter().position(|m| m == method).expect("counted");
        inner.held.remove(at);
    }
}

/// Returns the queued updates from `offset` on at once, or waits for one (up to the fake's long
/// poll or the bot's own timeout, whichever is shorter).
fn get_updates(st: &State, body: &Value) -> Value {
    let offset = body["offset"].as_u64().unwrap_or(0);
    let asked = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
    let deadline = Instant::now() + asked.min(st.long_poll);
    let mut inner = st.lock();
    loop {
        inner.updates.retain(|u| u["update_id"].as_u64().unwrap_or(0) >= offset);
        if !inner.updates.is_empty() {
            let (now, wall) = (Instant::now(), SystemTime::now());
            let ids: Vec<u64> =
                inner.updates.iter().filter_map(|u| u["update_id"].as_u64()).collect();
            for id in ids {
                if !inner.delivered.iter().any(|d| d.0 == id) {
                    inner.delivered.push((id, now, wall));
                }
            }
            return Value::Array(inner.updates.clone());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || inner.closed {
            return json!([]);
        }
        inner = st.changed.wait_timeout(inner, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One HTTP/1.1 POST with a JSON body; returns the status line and the body.
    fn post(url: &str, path: &str, body: &Value) -> (String, Value) {
        let addr = url.strip_prefix("http://").unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        let body = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), serde_json::from_str(body).unwrap_or(Value::Null))
    }

    #[test]
    fn a_wrong_token_is_a_404_and_counted_and_records_no_call() {
        let fake = FakeTelegram::start();
        let (status, _) = post(&fake.url, "/bot123456:other/sendMessage", &json!({}));
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        assert_eq!(fake.bad_token(), 1);
        assert!(fake.calls("sendMessage").is_empty());
    }

    #[test]
    fn method_names_are_case_insensitive_and_messages_get_ids() {
        let fake = FakeTelegram::start();
        let body = json!({ "chat_id": 42, "text": "hi" });
        let (status, reply) = post(&fake.url, &format!("/bot{TOKEN}/SendMessage"), &body);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(reply["result"]["message_id"], 1);
        let call = fake.wait_call("sendMessage", |b| text(b) == "hi");
        assert_eq!(call.message_id, Some(1));
    }

    #[test]
    fn scripted_failures_come_in_order_then_calls_succeed() {
        let fake = FakeTelegram::start();
        fake.fail_next("getMe", Failure::TooManyRequests { retry_after: 3 });
        fake.fail_next("getMe", Failure::Garbage);
        let path = format!("/bot{TOKEN}/getMe");
        let (status, reply) = post(&fake.url, &path, &json!({}));
        assert_eq!(
            (status.as_str(), &reply["parameters"]["retry_after"]),
            ("HTTP/1.1 429 Too Many Requests", &json!(3))
        );
        assert_eq!(post(&fake.url, &path, &json!({})).1, Value::Null, "garbage is not JSON");
        assert_eq!(post(&fake.url, &path, &json!({})).1["ok"], true);
    }
}
