//! The bot's tasks: the *poller* (long-polls `getUpdates`, applies buttons and commands), the
//! *questions* task (one short-lived task per question: post it, wait for its end, edit it) and
//! the *notices* task (replies, button acknowledgements, alerts, in order). None of them waits
//! on another: a Bot API call that hangs holds up only its own question (up to
//! [`MAX_CONCURRENT_POSTS`] questions post at once) or the notices queue, never the poller. No
//! task ever gives up: failed or unanswered calls are retried with backoff, and the poller keeps
//! polling whatever happens.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use teloxide_core::prelude::*;
use teloxide_core::types::{AllowedUpdate, CallbackQueryId, Message, UpdateKind, User};
use teloxide_core::{ApiError, RequestError};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::alerts::{AlertDeduper, AlertMessage};
use super::render::{
    Addressee, BotCommand, Callback, addressee, closed_text, help_text, keyboard, may_answer,
    over_budget_text, parse_callback, parse_command, pending_text, question_text, tagged,
    unaddressed_text,
};
use super::{BotControl, TelegramConfig, TelegramError};
use crate::broker::{AnswerTarget, Answered, Broker, BrokerEvent, QuestionId};
use crate::scope::{Answer, Channel, Responder};
use crate::terminal::sanitize;

/// Attempts per outgoing call before it is dropped (a 429 wait counts as one).
const MAX_ATTEMPTS: u32 = 6;
/// The longest `retry_after` honoured at once.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Questions whose messages are posted or edited at the same time; more wait their turn.
const MAX_CONCURRENT_POSTS: usize = 4;

/// Per sandbox: blocked-traffic alerts posted, and alerts held back by the budget.
type AlertCounts = Arc<std::sync::Mutex<HashMap<String, (u64, u64)>>>;

/// The running bot. Dropping it stops the bot.
pub struct TelegramHandle {
    alerts: mpsc::Sender<AlertMessage>,
    alerts_dropped: Arc<AtomicU64>,
    alert_counts: AlertCounts,
    alerts_per_window: u32,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for TelegramHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramHandle").finish_non_exhaustive()
    }
}

impl TelegramHandle {
    /// Queues a blocked-traffic alert; never blocks (`false`: the queue was full, counted).
    pub fn alert(&self, alert: AlertMessage) -> bool {
        let ok = self.alerts.try_send(alert).is_ok();
        if !ok {
            self.alerts_dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// The per-sandbox alert budget (messages per alert window).
    pub fn alerts_per_window(&self) -> u32 {
        self.alerts_per_window
    }

    /// Alerts dropped because the queue was full.
    pub fn alerts_dropped(&self) -> u64 {
        self.alerts_dropped.load(Ordering::Relaxed)
    }

    /// Per sandbox: (alert messages posted, blocked attempts held back by the per-sandbox
    /// budget and only counted in a summary), sorted by sandbox.
    pub fn alert_counts(&self) -> Vec<(String, u64, u64)> {
        let map = self.alert_counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = map.iter().map(|(s, (a, b))| (s.clone(), *a, *b)).collect();
        v.sort();
        v
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
    /// The broker's run id, in every button's data.
    run: u64,
    /// This bot's user id: the digits before the token's `:` (a button is obeyed only under a
    /// message this id posted; 0 if they do not fit, which matches no message).
    me: u64,
    /// This bot's username, asked (`getMe`) the first time a group command names a bot.
    username: std::sync::OnceLock<String>,
}

pub(crate) fn spawn(
    config: TelegramConfig,
    broker: Broker,
    control: Arc<dyn BotControl>,
) -> Result<TelegramHandle, TelegramError> {
    if config.chats.is_empty() {
        return Err(TelegramError::NoChats);
    }
    // The client's own limit only backs up the per-call one (`Shared::call`) and must let a
    // long poll run its course.
    let bot = make_bot(&config, config.poll_timeout + config.request_timeout)?;
    let chats = config.chats.iter().copied().collect();
    let alert_window = config.alert_window;
    let alerts_per_window = config.alerts_per_window;
    let me = config.token.expose().split(':').next().and_then(|id| id.parse().ok()).unwrap_or(0);
    let shared = Arc::new(Shared {
        bot,
        config,
        chats,
        run: broker.run_id(),
        me,
        username: std::sync::OnceLock::new(),
    });
    let events = broker.subscribe();
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (alert_tx, alert_rx) = mpsc::channel(1024);
    let questions = Questions {
        shared: shared.clone(),
        closers: HashMap::new(),
        posts: Arc::new(Semaphore::new(MAX_CONCURRENT_POSTS)),
    };
    let alert_counts: AlertCounts = Arc::default();
    let notices = Notices {
        shared: shared.clone(),
        dedup: AlertDeduper::new(alert_window).with_budget(alerts_per_window),
        counts: alert_counts.clone(),
    };
    let poller = Poller { shared, broker, control, out: out_tx };
    let tasks = vec![
        tokio::spawn(questions.run(events)),
        tokio::spawn(notices.run(out_rx, alert_rx)),
        tokio::spawn(poller.run()),
    ];
    Ok(TelegramHandle {
        alerts: alert_tx,
        alerts_dropped: Arc::default(),
        alert_counts,
        alerts_per_window,
        tasks,
    })
}

/// The Bot API client of `config` (its server, its token) whose HTTP client gives up on a call
/// after `timeout`.
fn make_bot(config: &TelegramConfig, timeout: Duration) -> Result<Bot, TelegramError> {
    let client = teloxide_core::net::default_reqwest_settings()
        .timeout(timeout)
        .build()
        .map_err(|e| TelegramError::HttpClient(redact(&e.to_string(), config.token.expose())))?;
    let mut bot = Bot::with_client(config.token.expose(), client);
    if let Some(url) = &config.api_url {
        // `join` with an absolute URL parses it (reqwest's Url type is not re-exported).
        let parsed = bot
            .api_url()
            .join(url)
            .map_err(|e| TelegramError::BadApiUrl { url: url.clone(), reason: e.to_string() })?;
        bot = bot.set_api_url(parsed);
    }
    Ok(bot)
}

/// Asks the Bot API once who the bot is (`getMe`), giving up after `timeout`: the bot's
/// `@username`, or why it could not be reached (the token never shown). `sandgate doctor`'s
/// reachability check; the bot itself retries instead.
pub(crate) async fn reachable(
    config: &TelegramConfig,
    timeout: Duration,
) -> Result<String, String> {
    let bot = make_bot(config, timeout).map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, bot.get_me()).await {
        Ok(Ok(me)) => Ok(me.user.username.map_or_else(|| me.user.first_name, |u| format!("@{u}"))),
        Ok(Err(e)) => Err(redact(&e.to_string(), config.token.expose())),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

impl Shared {
    /// Runs one API call with retries; `None` if it failed for good (logged).
    async fn call<T, F, Fut>(&self, what: &str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let mut delay = self.config.min_backoff;
        let limit = self.config.request_timeout;
        for attempt in 1..=MAX_ATTEMPTS {
            let wait = match tokio::time::timeout(limit, f()).await {
                Ok(Ok(v)) => return Some(v),
                // Dropping the call closes its connection; the retry opens a fresh one.
                Err(_) => {
                    let wait = self.next_backoff(&mut delay);
                    let error = format!("no answer within {limit:?}");
                    tracing::warn!(call = what, attempt, %error, ?wait, "Telegram call failed; retrying");
                    wait
                }
                Ok(Err(e)) => match self.retry_delay(&e, &mut delay) {
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
        match e {
            RequestError::RetryAfter(s) => Some(s.duration().min(MAX_RETRY_AFTER)),
            RequestError::Network(_) | RequestError::InvalidJson { .. } | RequestError::Io(_) => {
                Some(self.next_backoff(backoff))
            }
            // A description Telegram did not document: may be a transient server fault.
            RequestError::Api(ApiError::Unknown(_)) => Some(self.next_backoff(backoff)),
            RequestError::Api(_) | RequestError::MigrateToChatId(_) => None,
        }
    }

    /// The current backoff, doubling the next one (up to `max_backoff`).
    fn next_backoff(&self, backoff: &mut Duration) -> Duration {
        let d = *backoff;
        *backoff = (*backoff * 2).min(self.config.max_backoff);
        d
    }

    /// The error's text with the token cut out, whatever the HTTP layer put in it.
    fn describe(&self, e: &RequestError) -> String {
        redact(&e.to_string(), self.config.token.expose())
    }

    fn allowed(&self, chat: ChatId) -> bool {
        self.chats.contains(&chat.0)
    }

    /// `text` as posted: after this machine's name, when one is configured.
    fn tag(&self, text: &str) -> String {
        tagged(&self.config.name, text)
    }

    /// This bot's username (`getMe`, once it answers); `None` while Telegram does not say.
    async fn username(&self) -> Option<String> {
        if let Some(name) = self.username.get() {
            return Some(name.clone());
        }
        let me = self.call("getMe", || self.bot.get_me().into_future()).await?;
        let name = me.user.username?;
        Some(self.username.get_or_init(|| name).clone())
    }
}

/// Posts each question, and edits its messages once it ends.
struct Questions {
    shared: Arc<Shared>,
    /// The open questions' tasks, waiting for the text their messages become.
    closers: HashMap<QuestionId, oneshot::Sender<String>>,
    posts: Arc<Semaphore>,
}

impl Questions {
    async fn run(mut self, mut events: broadcast::Receiver<BrokerEvent>) {
        // Dropped with this future when the bot stops, which aborts the questions' tasks.
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ev) => self.on_event(ev, &mut tasks),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "Telegram sender lagged behind the broker");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
    }

    fn on_event(&mut self, ev: BrokerEvent, tasks: &mut JoinSet<()>) {
        // Tasks that gave up waiting (their question's end was among the events a lag lost).
        self.closers.retain(|_, tx| !tx.is_closed());
        if let BrokerEvent::Asked(q) = &ev {
            let (tx, rx) = oneshot::channel();
            self.closers.insert(q.id, tx);
            let (id, text) = (q.id, self.shared.tag(&question_text(q)));
            // Every question ends by its deadline; a few seconds on top for the broker's event.
            let wait = q.deadline.duration_since(SystemTime::now()).unwrap_or_default()
                + Duration::from_secs(5);
            tasks.spawn(question(self.shared.clone(), self.posts.clone(), id, text, rx, wait));
            return;
        }
        if let Some(text) = over_budget_text(&ev) {
            let sh = self.shared.clone();
            tasks.spawn(async move { broadcast(&sh, "sendMessage(budget)", text).await });
            return;
        }
        let Some((id, text)) = closed_text(&ev) else { return };
        if let Some(tx) = self.closers.remove(&id) {
            // The task edits its messages as soon as they are posted (at once if they are).
            let _ = tx.send(self.shared.tag(&text));
        }
    }
}

/// One question's messages: posted in every chat, then edited to `closed`'s text when it ends.
async fn question(
    sh: Arc<Shared>,
    posts: Arc<Semaphore>,
    id: QuestionId,
    text: String,
    mut closed: oneshot::Receiver<String>,
    wait: Duration,
) {
    let mut messages = Vec::new();
    {
        let Ok(_turn) = posts.acquire().await else { return };
        // Answered while it waited for its turn: nothing left to ask.
        if closed.try_recv().is_ok() {
            return;
        }
        for &chat in &sh.config.chats {
            let chat = ChatId(chat);
            let sent = sh
                .call("sendMessage(question)", || {
                    sh.bot
                        .send_message(chat, text.clone())
                        .reply_markup(keyboard(sh.run, id))
                        .into_future()
                })
                .await;
            if let Some(m) = sent {
                messages.push((chat, m.id));
            }
        }
    }
    let text = match tokio::time::timeout(wait, closed).await {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => return,
        // Its end was among the events the bot lagged behind on.
        Err(_) => sh.tag("⌛ this question has ended (see `sandgate rules` or `/rules`)"),
    };
    if messages.is_empty() {
        return;
    }
    let Ok(_turn) = posts.acquire().await else { return };
    for (chat, msg) in messages {
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

/// Posts `text` in every chat (after this machine's name).
async fn broadcast(sh: &Shared, what: &str, text: String) {
    let text = sh.tag(&text);
    for &chat in &sh.config.chats {
        sh.call(what, || sh.bot.send_message(ChatId(chat), text.clone()).into_future()).await;
    }
}

/// Replies to commands, button acknowledgements and alerts, sent one after another.
struct Notices {
    shared: Arc<Shared>,
    dedup: AlertDeduper,
    counts: AlertCounts,
}

impl Notices {
    async fn run(
        mut self,
        mut out: mpsc::UnboundedReceiver<Out>,
        mut alerts: mpsc::Receiver<AlertMessage>,
    ) {
        loop {
            let flush_at = self.dedup.next_deadline();
            tokio::select! {
                biased;
                o = out.recv() => match o {
                    Some(o) => self.on_out(o).await,
                    None => return,
                },
                Some(a) = alerts.recv() => {
                    let (sandbox, count) = (a.sandbox.clone(), a.count.max(1));
                    let posted = self.dedup.offer(a, Instant::now().into_std());
                    {
                        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                        let e = c.entry(sandbox).or_default();
                        match posted {
                            Some(_) => e.0 += 1,
                            None => e.1 += count,
                        }
                    }
                    if let Some(text) = posted {
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

    async fn on_out(&mut self, o: Out) {
        let sh = &self.shared;
        match o {
            Out::Text { chat, text } => {
                let text = sh.tag(&text);
                sh.call("sendMessage(reply)", || {
                    sh.bot.send_message(chat, text.clone()).into_future()
                })
                .await;
            }
            Out::CallbackAnswer { id, text } => {
                let text = sh.tag(&text);
                sh.call("answerCallbackQuery", || {
                    sh.bot.answer_callback_query(id.clone()).text(text.clone()).into_future()
                })
                .await;
            }
        }
    }

    async fn broadcast_text(&self, text: String) {
        broadcast(&self.shared, "sendMessage(alert)", text).await;
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
                            // Telegram gives each token's updates to one poller: two daemons
                            // on one token would each get some answers meant for the other.
                            tracing::warn!(
                                "another process polls this Telegram bot's token; every \
                                 machine (daemon) sharing a chat needs a bot of its own"
                            );
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
                let private = m.chat.is_private();
                let sender = person(&m);
                if !private {
                    // Several machines' bots may share the chat: obey only what is for this one.
                    let replies_to_me = m
                        .reply_to_message()
                        .and_then(|r| r.from.as_ref())
                        .is_some_and(|u| u.id.0 == self.shared.me);
                    let named = text.split_whitespace().next().is_some_and(|w| w.contains('@'));
                    let me = if named { self.shared.username().await } else { None };
                    match addressee(text, me.as_deref(), replies_to_me) {
                        Addressee::Me => {}
                        Addressee::Other | Addressee::Chatter => return,
                        Addressee::Nobody => {
                            // A hint only for those who may answer: nobody else gets replies.
                            if may_answer(private, sender, &self.shared.config.users).is_ok() {
                                let text =
                                    unaddressed_text(self.shared.username().await.as_deref());
                                let _ = self.out.send(Out::Text { chat: m.chat.id, text });
                            }
                            return;
                        }
                    }
                }
                if let Err(e) = may_answer(private, sender, &self.shared.config.users) {
                    tracing::warn!(chat = m.chat.id.0, %e, "refused a Telegram command");
                    let _ = self.out.send(Out::Text { chat: m.chat.id, text: e.to_string() });
                    return;
                }
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
                // Telegram sends a press only to the bot whose message carries the button;
                // checked here too, so that no other machine's question is answered on this one.
                let poster = cq
                    .message
                    .as_ref()
                    .and_then(|m| m.regular_message())
                    .and_then(|m| m.from.as_ref())
                    .map(|u| u.id.0);
                if poster != Some(self.shared.me) {
                    tracing::warn!(chat = chat.0, "ignoring a button under another bot's message");
                    let text = "This button is not under a question of this bot; nothing was \
                                answered."
                        .into();
                    let _ = self.out.send(Out::CallbackAnswer { id: cq.id, text });
                    return;
                }
                let private = cq.message.as_ref().is_some_and(|m| m.chat().is_private());
                // Bots cannot press buttons; a press that says it came from one is not a person's.
                let sender = Some(cq.from.id.0).filter(|_| !cq.from.is_bot);
                if let Err(e) = may_answer(private, sender, &self.shared.config.users) {
                    tracing::warn!(chat = chat.0, %e, "refused a Telegram button press");
                    let _ = self.out.send(Out::CallbackAnswer { id: cq.id, text: e.to_string() });
                    return;
                }
                let by = responder(Some(&cq.from), chat);
                let run = self.shared.run;
                let text = match cq.data.as_deref().and_then(|d| parse_callback(run, d)) {
                    Some(Callback::Current(id, answer)) => {
                        match self.broker.answer(AnswerTarget::Question(id), answer, by).await {
                            Ok(done) => summary(answer, &done),
                            Err(e) => e.to_string(),
                        }
                    }
                    // Ids restart with each daemon: this button's q7 is not today's q7.
                    Some(Callback::Stale) => "This question is no longer pending (sandgate \
                                              restarted since it was asked); nothing was \
                                              answered. See /pending."
                        .into(),
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
                let target = AnswerTarget::Host { pattern, sandbox: None, any_port: false };
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

/// The user id of the person who typed `m`, or `None` when it is not a person's own message:
/// sent on behalf of a chat (an anonymous group admin or a channel: `from` is then Telegram's
/// stand-in bot, e.g. GroupAnonymousBot 1087968824, whose id someone may have put in `users`),
/// by a bot, forwarded (`from` is who forwarded it, the text someone else's), or composed by an
/// inline bot. Such a message answers nothing, whoever `users` lists.
fn person(m: &Message) -> Option<u64> {
    let from = m.from.as_ref()?;
    let relayed = m.sender_chat.is_some()
        || from.is_bot
        || m.via_bot.is_some()
        || m.is_automatic_forward()
        || m.forward_origin().is_some();
    (!relayed).then_some(from.id.0)
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
        // Grant ids come in their JSON form (`g12`); people see `#12` everywhere.
        let ids: Vec<String> =
            done.grants.iter().map(|g| format!("#{}", g.trim_start_matches('g'))).collect();
        s.push_str(&format!(" · rule {}", ids.join(", ")));
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
