//! The bot's two tasks: the *poller* (long-polls `getUpdates`, applies buttons and commands) and
//! the *sender* (posts questions, edits them when they end, replies, alerts). Neither ever gives
//! up: failed calls are retried with backoff, and the poller keeps polling whatever happens.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use teloxide::prelude::*;
use teloxide::types::{AllowedUpdate, CallbackQueryId, MessageId, UpdateKind, User};
use teloxide::{ApiError, RequestError};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::alerts::{Alert, AlertDeduper};
use super::render::{
    BotCommand, closed_text, help_text, keyboard, parse_callback, parse_command, pending_text,
    question_text,
};
use super::{BotControl, TelegramConfig, TelegramError};
use crate::broker::{AnswerTarget, Answered, Broker, BrokerEvent, QuestionId};
use crate::scope::{Answer, Channel, Responder};
use crate::terminal::sanitize;

/// Attempts per outgoing call before it is dropped (a 429 wait counts as one).
const MAX_ATTEMPTS: u32 = 6;
/// The longest `retry_after` honoured at once.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// The running bot. Dropping it stops the bot.
pub struct TelegramHandle {
    alerts: mpsc::Sender<Alert>,
    alerts_dropped: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for TelegramHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramHandle").finish_non_exhaustive()
    }
}

impl TelegramHandle {
    /// Queues a blocked-traffic alert; never blocks (`false`: the queue was full, counted).
    pub fn alert(&self, alert: Alert) -> bool {
        let ok = self.alerts.try_send(alert).is_ok();
        if !ok {
            self.alerts_dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Alerts dropped because the queue was full.
    pub fn alerts_dropped(&self) -> u64 {
        self.alerts_dropped.load(Ordering::Relaxed)
    }

    /// Stops the bot's tasks.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for TelegramHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

enum Out {
    Text { chat: ChatId, text: String },
    CallbackAnswer { id: CallbackQueryId, text: String },
}

struct Shared {
    bot: Bot,
    config: TelegramConfig,
    chats: HashSet<i64>,
}

pub(crate) fn spawn(
    config: TelegramConfig,
    broker: Broker,
    control: Arc<dyn BotControl>,
) -> Result<TelegramHandle, TelegramError> {
    if config.chats.is_empty() {
        return Err(TelegramError::NoChats);
    }
    let mut bot = Bot::new(config.token.expose());
    if let Some(url) = &config.api_url {
        // `join` with an absolute URL parses it (reqwest's Url type is not re-exported).
        let parsed = bot
            .api_url()
            .join(url)
            .map_err(|e| TelegramError::BadApiUrl { url: url.clone(), reason: e.to_string() })?;
        bot = bot.set_api_url(parsed);
    }
    let chats = config.chats.iter().copied().collect();
    let alert_window = config.alert_window;
    let shared = Arc::new(Shared { bot, config, chats });
    let events = broker.subscribe();
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (alert_tx, alert_rx) = mpsc::channel(1024);
    let sender = Sender {
        shared: shared.clone(),
        messages: HashMap::new(),
        dedup: AlertDeduper::new(alert_window),
    };
    let poller = Poller { shared, broker, control, out: out_tx };
    let tasks =
        vec![tokio::spawn(sender.run(events, out_rx, alert_rx)), tokio::spawn(poller.run())];
    Ok(TelegramHandle { alerts: alert_tx, alerts_dropped: Arc::default(), tasks })
}

impl Shared {
    /// Runs one API call with retries; `None` if it failed for good (logged).
    async fn call<T, F, Fut>(&self, what: &str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let mut delay = self.config.min_backoff;
        for attempt in 1..=MAX_ATTEMPTS {
            let wait = match f().await {
                Ok(v) => return Some(v),
                Err(e) => match self.retry_delay(&e, &mut delay) {
                    Some(wait) => {
                        let error = self.describe(&e);
                        tracing::warn!(call = what, attempt, %error, ?wait, "Telegram call failed; retrying");
                        wait
                    }
                    None => {
                        let error = self.describe(&e);
                        tracing::warn!(call = what, %error, "Telegram call failed; giving up");
                        return None;
                    }
                },
            };
            tokio::time::sleep(wait).await;
        }
        tracing::warn!(call = what, "Telegram call failed {MAX_ATTEMPTS} times; dropped");
        None
    }

    /// How long to wait before retrying after `e`, or `None` if retrying cannot help.
    fn retry_delay(&self, e: &RequestError, backoff: &mut Duration) -> Option<Duration> {
        let mut next = || {
            let d = *backoff;
            *backoff = (*backoff * 2).min(self.config.max_backoff);
            d
        };
        match e {
            RequestError::RetryAfter(s) => Some(s.duration().min(MAX_RETRY_AFTER)),
            RequestError::Network(_) | RequestError::InvalidJson { .. } | RequestError::Io(_) => {
                Some(next())
            }
            // A description Telegram did not document: may be a transient server fault.
            RequestError::Api(ApiError::Unknown(_)) => Some(next()),
            RequestError::Api(_) | RequestError::MigrateToChatId(_) => None,
        }
    }

    /// The error's text with the token cut out, whatever the HTTP layer put in it.
    fn describe(&self, e: &RequestError) -> String {
        redact(&e.to_string(), self.config.token.expose())
    }

    fn allowed(&self, chat: ChatId) -> bool {
        self.chats.contains(&chat.0)
    }
}

struct Sender {
    shared: Arc<Shared>,
    messages: HashMap<QuestionId, Vec<(ChatId, MessageId)>>,
    dedup: AlertDeduper,
}

impl Sender {
    async fn run(
        mut self,
        mut events: broadcast::Receiver<BrokerEvent>,
        mut out: mpsc::UnboundedReceiver<Out>,
        mut alerts: mpsc::Receiver<Alert>,
    ) {
        loop {
            let flush_at = self.dedup.next_deadline();
            tokio::select! {
                biased;
                ev = events.recv() => match ev {
                    Ok(ev) => self.on_event(ev).await,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "Telegram sender lagged behind the broker");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(o) = out.recv() => self.on_out(o).await,
                Some(a) = alerts.recv() => {
                    if let Some(text) = self.dedup.offer(a, Instant::now().into_std()) {
                        self.broadcast_text(text).await;
                    }
                }
                () = sleep_until_opt(flush_at) => {
                    for text in self.dedup.flush(Instant::now().into_std()) {
                        self.broadcast_text(text).await;
                    }
                }
            }
        }
    }

    async fn on_event(&mut self, ev: BrokerEvent) {
        let sh = self.shared.clone();
        if let BrokerEvent::Asked(q) = &ev {
            let text = question_text(q);
            for &chat in &sh.config.chats {
                let chat = ChatId(chat);
                let sent = sh
                    .call("sendMessage(question)", || {
                        sh.bot
                            .send_message(chat, text.clone())
                            .reply_markup(keyboard(q.id))
                            .into_future()
                    })
                    .await;
                if let Some(m) = sent {
                    self.messages.entry(q.id).or_default().push((chat, m.id));
                }
            }
            return;
        }
        let Some((id, text)) = closed_text(&ev) else { return };
        for (chat, msg) in self.messages.remove(&id).unwrap_or_default() {
            let edited = sh
                .call("editMessageText", || async {
                    match sh.bot.edit_message_text(chat, msg, text.clone()).await {
                        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                        Err(e) => Err(e),
                    }
                })
                .await;
            if edited.is_none() {
                // Leave a trace in the chat even if the edit failed.
                sh.call("sendMessage(answered)", || {
                    sh.bot.send_message(chat, text.clone()).into_future()
                })
                .await;
            }
        }
    }

    async fn on_out(&mut self, o: Out) {
        let sh = &self.shared;
        match o {
            Out::Text { chat, text } => {
                sh.call("sendMessage(reply)", || {
                    sh.bot.send_message(chat, text.clone()).into_future()
                })
                .await;
            }
            Out::CallbackAnswer { id, text } => {
                sh.call("answerCallbackQuery", || {
                    sh.bot.answer_callback_query(id.clone()).text(text.clone()).into_future()
                })
                .await;
            }
        }
    }

    async fn broadcast_text(&self, text: String) {
        let sh = &self.shared;
        for &chat in &sh.config.chats {
            sh.call("sendMessage(alert)", || {
                sh.bot.send_message(ChatId(chat), text.clone()).into_future()
            })
            .await;
        }
    }
}

async fn sleep_until_opt(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// A `/rules`, `/revoke` or `/status` call, run on a blocking thread.
type ControlCall = Box<dyn FnOnce(&dyn BotControl) -> String + Send>;

struct Poller {
    shared: Arc<Shared>,
    broker: Broker,
    control: Arc<dyn BotControl>,
    out: mpsc::UnboundedSender<Out>,
}

impl Poller {
    async fn run(self) {
        let sh = self.shared.clone();
        let mut offset: i32 = 0;
        let mut backoff = sh.config.min_backoff;
        let timeout = u32::try_from(sh.config.poll_timeout.as_secs()).unwrap_or(10);
        loop {
            let req = sh
                .bot
                .get_updates()
                .offset(offset)
                .timeout(timeout)
                .allowed_updates([AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
            match req.await {
                Ok(updates) => {
                    backoff = sh.config.min_backoff;
                    for u in updates {
                        offset = offset.max(i32::try_from(u.id.0).unwrap_or(i32::MAX - 1) + 1);
                        self.handle(u.kind).await;
                    }
                }
                Err(e) => {
                    let wait = match &e {
                        // Another process polls with this token; keep trying, slowly.
                        RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => {
                            let d = backoff;
                            backoff = (backoff * 2).min(sh.config.max_backoff);
                            d
                        }
                        other => {
                            sh.retry_delay(other, &mut backoff).unwrap_or(sh.config.max_backoff)
                        }
                    };
                    let error = sh.describe(&e);
                    tracing::warn!(%error, ?wait, "Telegram getUpdates failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn handle(&self, kind: UpdateKind) {
        match kind {
            UpdateKind::Message(m) => {
                if !self.shared.allowed(m.chat.id) {
                    tracing::warn!(
                        chat = m.chat.id.0,
                        "ignoring a Telegram message from a chat not configured"
                    );
                    return;
                }
                let Some(text) = m.text() else { return };
                let by = responder(m.from.as_ref(), m.chat.id);
                let reply = self.command(text, by).await;
                let _ = self.out.send(Out::Text { chat: m.chat.id, text: reply });
            }
            UpdateKind::CallbackQuery(cq) => {
                let chat =
                    cq.message.as_ref().map(|m| m.chat().id).unwrap_or(ChatId(cq.from.id.0 as i64));
                if !self.shared.allowed(chat) {
                    tracing::warn!(
                        chat = chat.0,
                        "ignoring a Telegram button press from a chat not configured"
                    );
                    return;
                }
                let by = responder(Some(&cq.from), chat);
                let text = match cq.data.as_deref().and_then(parse_callback) {
                    Some((id, answer)) => {
                        match self.broker.answer(AnswerTarget::Question(id), answer, by).await {
                            Ok(done) => summary(answer, &done),
                            Err(e) => e.to_string(),
                        }
                    }
                    None => "This button is not sandgate's.".into(),
                };
                let _ = self.out.send(Out::CallbackAnswer { id: cq.id, text });
            }
            _ => {}
        }
    }

    async fn command(&self, text: &str, by: Responder) -> String {
        let cmd = match parse_command(text) {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        let blocking = |f: ControlCall| {
            let control = self.control.clone();
            async move {
                tokio::task::spawn_blocking(move || f(control.as_ref()))
                    .await
                    .unwrap_or_else(|e| format!("internal error: {e}"))
            }
        };
        match cmd {
            BotCommand::Allow { pattern, answer } | BotCommand::Deny { pattern, answer } => {
                let target = AnswerTarget::Host { pattern, sandbox: None };
                match self.broker.answer(target, answer, by).await {
                    Ok(done) => summary(answer, &done),
                    Err(e) => e.to_string(),
                }
            }
            BotCommand::Pending => pending_text(&self.broker.pending(), SystemTime::now()),
            BotCommand::Rules => blocking(Box::new(|c| c.rules())).await,
            BotCommand::Status => blocking(Box::new(|c| c.status())).await,
            BotCommand::Revoke(id) => {
                blocking(Box::new(move |c| {
                    c.revoke(&id).unwrap_or_else(|e| format!("not revoked: {e}"))
                }))
                .await
            }
            BotCommand::Help => help_text(),
        }
    }
}

fn redact(text: &str, token: &str) -> String {
    let mut out = text.replace(token, "<token>");
    // The secret half alone is as sensitive as the whole.
    if let Some((_, secret)) = token.split_once(':') {
        out = out.replace(secret, "<token>");
    }
    out
}

fn responder(user: Option<&User>, chat: ChatId) -> Responder {
    let who = match user {
        Some(u) => match &u.username {
            Some(name) => format!("@{}", sanitize(name)),
            None => sanitize(&u.first_name),
        },
        None => format!("chat {}", chat.0),
    };
    Responder::new(Channel::Telegram, who)
}

fn summary(answer: Answer, done: &Answered) -> String {
    let mut s = match done.released.len() {
        0 => format!("{answer}: no request was waiting"),
        1 => format!("{answer}: 1 request released"),
        n => format!("{answer}: {n} requests released"),
    };
    if !done.grants.is_empty() {
        s.push_str(&format!(" · rule {}", done.grants.join(", ")));
    }
    if !done.grant_errors.is_empty() {
        s.push_str(&format!(" · could not save the rule: {}", done.grant_errors.join("; ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_logged_without_the_token() {
        let t = "123456:AAbbCC-dd";
        assert_eq!(
            redact("error sending request for url (http://x/bot123456:AAbbCC-dd/getMe)", t),
            "error sending request for url (http://x/bot<token>/getMe)"
        );
        assert_eq!(redact("secret AAbbCC-dd alone", t), "secret <token> alone");
    }
}
