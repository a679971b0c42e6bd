//! A fake Telegram Bot API server on 127.0.0.1:0: long-polled `getUpdates` fed by the test,
//! `sendMessage` / `editMessageText` / `answerCallbackQuery` recorded with their arrival time,
//! and scripted failures (429 with retry_after, 500, garbage).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// One API call the bot made.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub at: Instant,
}

/// A scripted failure for the next call of a method.
#[derive(Debug, Clone)]
pub enum Failure {
    TooManyRequests {
        retry_after: u32,
    },
    ServerError,
    Garbage,
    /// No answer at all (an hour), as from a server that hangs.
    Hang,
}

#[derive(Default)]
struct Inner {
    updates: Vec<Value>,
    next_update_id: u64,
    next_message_id: i64,
    calls: Vec<Call>,
    failures: VecDeque<(String, Failure)>,
    /// When each update id was written into a getUpdates response.
    delivered: Vec<(u64, Instant)>,
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
    updates_added: Notify,
    call_made: Notify,
}

pub struct FakeTelegram {
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn user(id: i64, username: &str) -> Value {
    json!({ "id": id, "is_bot": false, "first_name": username, "username": username })
}

pub fn message_json(id: i64, chat: i64, text: &str) -> Value {
    json!({
        "message_id": id,
        "date": 1_700_000_000,
        "chat": { "id": chat, "type": "private", "first_name": "chat" },
        "text": text,
    })
}

impl FakeTelegram {
    pub async fn start() -> FakeTelegram {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| serve(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeTelegram { url: format!("http://{addr}/"), state, task }
    }

    /// Queues an update (the `update_id` is assigned); returns its id.
    pub fn push_update(&self, mut update: Value) -> u64 {
        let id = {
            let mut inner = self.state.inner.lock().unwrap();
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            update["update_id"] = json!(id);
            inner.updates.push(update);
            id
        };
        self.state.updates_added.notify_waiters();
        id
    }

    /// A text message from `from` in `chat`.
    pub fn push_message(&self, chat: i64, from: &str, text: &str) -> u64 {
        let mut m = message_json(9000, chat, text);
        m["from"] = user(chat, from);
        self.push_update(json!({ "message": m }))
    }

    /// A button press on message `message_id` in `chat`.
    pub fn push_callback(&self, chat: i64, from: &str, message_id: i64, data: &str) -> u64 {
        self.push_update(json!({
            "callback_query": {
                "id": format!("cb{message_id}-{data}"),
                "from": user(chat, from),
                "chat_instance": "1",
                "message": message_json(message_id, chat, "question"),
                "data": data,
            }
        }))
    }

    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.state.inner.lock().unwrap().failures.push_back((method.to_string(), failure));
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        let inner = self.state.inner.lock().unwrap();
        inner.calls.iter().filter(|c| c.method == method).cloned().collect()
    }

    pub fn delivered_at(&self, update_id: u64) -> Option<Instant> {
        let inner = self.state.inner.lock().unwrap();
        inner.delivered.iter().find(|(id, _)| *id == update_id).map(|(_, at)| *at)
    }

    /// Waits (on the server's own notifications) for the `n`-th call (1-based) of `method` that
    /// matches `pred`.
    pub async fn wait_call(&self, method: &str, pred: impl Fn(&Value) -> bool) -> Call {
        self.wait_nth_call(method, 1, pred).await
    }

    pub async fn wait_nth_call(
        &self,
        method: &str,
        n: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Call {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.state.call_made.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = self.state.inner.lock().unwrap();
                let hits: Vec<_> =
                    inner.calls.iter().filter(|c| c.method == method && pred(&c.body)).collect();
                if hits.len() >= n {
                    return hits[n - 1].clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {method} call #{n} matching within 30 s; calls: {:?}",
                self.summary()
            );
            let _ = tokio::time::timeout(left, notified).await;
        }
    }

    pub fn summary(&self) -> Vec<String> {
        let inner = self.state.inner.lock().unwrap();
        let calls: Vec<String> = inner
            .calls
            .iter()
            .filter(|c| c.method != "getUpdates")
            .map(|c| format!("{} {}", c.method, c.body))
            .collect();
        calls[calls.len().saturating_sub(10)..].to_vec()
    }
}

async fn serve(
    st: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    // Telegram method names are case-insensitive; teloxide sends `SendMessage`.
    let raw = path.rsplit('/').next().unwrap_or("");
    let mut method = raw.chars().take(1).flat_map(char::to_lowercase).collect::<String>();
    method.push_str(raw.get(1..).unwrap_or(""));
    let token_ok = path.starts_with("/bot123456:") && path.matches('/').count() == 2;
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !token_ok {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            json!({ "ok": false, "error_code": 404, "description": "Not Found" }).to_string(),
        ));
    }
    let failure = {
        let mut inner = st.inner.lock().unwrap();
        inner.calls.push(Call { method: method.clone(), body: body.clone(), at: Instant::now() });
        let pos = inner.failures.iter().position(|(m, _)| *m == method);
        pos.and_then(|p| inner.failures.remove(p)).map(|(_, f)| f)
    };
    st.call_made.notify_waiters();
    if let Some(f) = failure {
        return Ok(match f {
            Failure::TooManyRequests { retry_after } => reply(
                StatusCode::TOO_MANY_REQUESTS,
                json!({
                    "ok": false, "error_code": 429,
                    "description": format!("Too Many Requests: retry after {retry_after}"),
                    "parameters": { "retry_after": retry_after },
                })
                .to_string(),
            ),
            Failure::ServerError => {
                reply(StatusCode::INTERNAL_SERVER_ERROR, "<html>502 Bad Gateway</html>".into())
            }
            Failure::Garbage => reply(StatusCode::OK, "\u{0}not json at all{".into()),
            Failure::Hang => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                reply(StatusCode::OK, json!({ "ok": true, "result": [] }).to_string())
            }
        });
    }
    let result = match method.as_str() {
        "getUpdates" => get_updates(&st, &body).await,
        "sendMessage" | "editMessageText" => {
            let id = {
                let mut inner = st.inner.lock().unwrap();
                inner.next_message_id += 1;
                inner.next_message_id
            };
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            let id = body["message_id"].as_i64().unwrap_or(id);
            message_json(id, chat, body["text"].as_str().unwrap_or(""))
        }
        _ => json!(true),
    };
    Ok(reply(StatusCode::OK, json!({ "ok": true, "result": result }).to_string()))
}

async fn get_updates(st: &State, body: &Value) -> Value {
    let offset = body["offset"].as_u64().unwrap_or(0);
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
    let deadline = Instant::now() + timeout;
    loop {
        let notified = st.updates_added.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut inner = st.inner.lock().unwrap();
            inner.updates.retain(|u| u["update_id"].as_u64().unwrap_or(0) >= offset);
            if !inner.updates.is_empty() {
                let now = Instant::now();
                let ids: Vec<u64> =
                    inner.updates.iter().filter_map(|u| u["update_id"].as_u64()).collect();
                for id in ids {
                    if !inner.delivered.iter().any(|(d, _)| *d == id) {
                        inner.delivered.push((id, now));
                    }
                }
                return Value::Array(inner.updates.clone());
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
            return json!([]);
        }
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    r
}
