//! The Telegram channel against a fake Bot API server on 127.0.0.1.

mod fake_telegram;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_telegram::{Failure, FakeTelegram};
use sandgate_approvals::telegram::{
    self, AlertMessage, BotControl, BotToken, TelegramConfig, TelegramHandle,
};
use sandgate_approvals::{
    Answer, AnswerTarget, Broker, BrokerConfig, Channel, Question, Resolution, Responder, Scope,
};
use serde_json::Value;

const CHAT: i64 = 42;
const STRANGER: i64 = 666;

struct Control {
    revoked: Mutex<Vec<String>>,
}

impl BotControl for Control {
    fn rules(&self) -> String {
        "#1 allow crates.io:443 always (global) by config".into()
    }
    fn revoke(&self, id: &str) -> Result<String, String> {
        self.revoked.lock().unwrap().push(id.into());
        if id == "1" { Ok("revoked #1".into()) } else { Err(format!("no grant {id}")) }
    }
    fn status(&self) -> String {
        "daemon up · 2 sandboxes".into()
    }
}

fn question(sandbox: &str, host: &str) -> Question {
    Question {
        sandbox: sandbox.into(),
        host: host.into(),
        port: 443,
        method: Some("GET".into()),
        path: Some("/index.json".into()),
        command: vec!["cargo".into(), "build".into()],
        cwd: Some("/home/u/proj".into()),
        project: Some("proj".into()),
        process: None,
    }
}

fn config(url: &str) -> TelegramConfig {
    let mut c = TelegramConfig::new(BotToken::new("123456:TEST-token").unwrap(), vec![CHAT]);
    c.api_url = Some(url.into());
    c.poll_timeout = Duration::from_secs(5);
    c.min_backoff = Duration::from_millis(50);
    c.max_backoff = Duration::from_millis(400);
    c
}

fn start(
    fake: &FakeTelegram,
    broker: &Broker,
    tweak: impl FnOnce(&mut TelegramConfig),
) -> (TelegramHandle, Arc<Control>) {
    let control = Arc::new(Control { revoked: Mutex::default() });
    let mut c = config(&fake.url);
    tweak(&mut c);
    let handle = telegram::spawn(c, broker.clone(), control.clone()).unwrap();
    (handle, control)
}

fn broker() -> Broker {
    Broker::new(BrokerConfig { timeout: Duration::from_secs(60), ..Default::default() }, None)
}

fn text_has(needle: &'static str) -> impl Fn(&Value) -> bool {
    move |b| b["text"].as_str().is_some_and(|t| t.contains(needle))
}

/// The callback data of the button labelled `label` in a sendMessage body.
fn button(body: &Value, label: &str) -> String {
    let rows = body["reply_markup"]["inline_keyboard"].as_array().expect("inline keyboard");
    for row in rows {
        for b in row.as_array().unwrap() {
            if b["text"] == label {
                return b["callback_data"].as_str().unwrap().to_string();
            }
        }
    }
    panic!("no button {label:?} in {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_releases_the_held_request_and_latencies_are_printed() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (_bot, _) = start(&fake, &b, |_| {});
    let mut post_ms = Vec::new();
    let mut release_ms = Vec::new();
    for round in 0..5usize {
        let host = format!("h{round}.example");
        let asked = Instant::now();
        let waiter = tokio::spawn({
            let (b, q) = (b.clone(), question("sb1", &host));
            async move {
                let out = b.ask(q).await;
                (out, Instant::now())
            }
        });
        let posted = fake
            .wait_nth_call("sendMessage", 1, move |body| {
                body["text"].as_str().is_some_and(|t| t.contains(&format!("{host}:443")))
            })
            .await;
        post_ms.push(posted.at.duration_since(asked).as_secs_f64() * 1000.0);
        let text = posted.body["text"].as_str().unwrap();
        for part in ["sb1", "GET /index.json", "cargo build", "/home/u/proj"] {
            assert!(text.contains(part), "{part:?} missing from {text:?}");
        }
        assert_eq!(posted.body["chat_id"], CHAT);
        for label in ["Allow once", "This session", "1 hour", "Always", "Deny"] {
            button(&posted.body, label);
        }
        let msg_id = round as i64 + 1;
        let update =
            fake.push_callback(CHAT, "alice", msg_id, &button(&posted.body, "This session"));
        let (out, released) = waiter.await.unwrap();
        assert_eq!(
            out,
            Resolution::Answered {
                answer: Answer::Allow(Scope::Session),
                by: Responder::new(Channel::Telegram, "@alice"),
                pattern: format!("h{round}.example"),
            }
        );
        let delivered = fake.delivered_at(update).expect("the update was delivered");
        release_ms.push(released.duration_since(delivered).as_secs_f64() * 1000.0);
        // The button press is acknowledged and the message edited for every chat.
        fake.wait_nth_call("answerCallbackQuery", round + 1, |b| {
            b["text"].as_str().is_some_and(|t| t.contains("1 request released"))
        })
        .await;
        let edit = fake.wait_nth_call("editMessageText", round + 1, |_| true).await;
        let edited = edit.body["text"].as_str().unwrap();
        assert!(edited.contains("allowed for this session in Telegram by @alice"), "{edited}");
        assert!(edit.body.get("reply_markup").is_none(), "buttons removed: {}", edit.body);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("telegram latency: blocked request -> question posted (ms): {post_ms:.2?}");
    println!("telegram latency: update delivered -> waiter released (ms): {release_ms:.2?}");
    let (p, r) = (median(&mut post_ms), median(&mut release_ms));
    println!("telegram latency medians: post {p:.2} ms, release {r:.2} ms (target <= 50 ms each)");
    // Printed for bench/telegram-latency.sh, never asserted: timing asserts flake on a loaded
    // machine.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_command_releases_the_held_request() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (_bot, _) = start(&fake, &b, |_| {});
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "api.example.com")).await }
    });
    fake.wait_call("sendMessage", text_has("api.example.com:443")).await;
    fake.push_message(CHAT, "bob", "/allow *.example.com 1h");
    let out = waiter.await.unwrap();
    assert_eq!(
        out,
        Resolution::Answered {
            answer: Answer::Allow(Scope::For(Duration::from_secs(3600))),
            by: Responder::new(Channel::Telegram, "@bob"),
            pattern: "*.example.com".into(),
        }
    );
    fake.wait_call("sendMessage", text_has("allowed for 1h: 1 request released")).await;
    fake.wait_call("editMessageText", text_has("(as *.example.com) in Telegram by @bob")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_ignored_and_pending_lists_open_questions() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (_bot, _) = start(&fake, &b, |_| {});
    let _w1 = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "one.example")).await }
    });
    let _w2 = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb2", "two.example")).await }
    });
    fake.wait_call("sendMessage", text_has("one.example:443")).await;
    let q2 = fake.wait_call("sendMessage", text_has("two.example:443")).await;

    // A stranger's command and button press...
    fake.push_message(STRANGER, "mallory", "/allow one.example");
    fake.push_callback(STRANGER, "mallory", 2, &button(&q2.body, "Always"));
    // ...then our /pending: the poller handles updates in order, so its reply proves the
    // stranger's updates were seen first.
    fake.push_message(CHAT, "alice", "/pending");
    let reply = fake.wait_call("sendMessage", text_has("pending:")).await;
    let text = reply.body["text"].as_str().unwrap();
    assert!(text.starts_with("2 pending:"), "{text}");
    // The two askers race, so which question got q1 is not fixed.
    assert!(text.contains(" · sb1 wants one.example:443 · 1 waiting"), "{text}");
    assert!(text.contains(" · sb2 wants two.example:443 · 1 waiting"), "{text}");
    assert_eq!(b.pending().len(), 2, "nothing was released by a stranger");
    for c in fake.calls("sendMessage").iter().chain(&fake.calls("answerCallbackQuery")) {
        assert_ne!(c.body["chat_id"], STRANGER, "the bot answered a stranger: {}", c.body);
    }
    assert!(fake.calls("answerCallbackQuery").is_empty());

    // /rules, /revoke, /status go to the daemon's control.
    fake.push_message(CHAT, "alice", "/rules");
    fake.wait_call("sendMessage", text_has("#1 allow crates.io")).await;
    fake.push_message(CHAT, "alice", "/revoke 7");
    fake.wait_call("sendMessage", text_has("not revoked: no grant 7")).await;
    fake.push_message(CHAT, "alice", "/status");
    fake.wait_call("sendMessage", text_has("daemon up")).await;
    fake.push_message(CHAT, "alice", "/frobnicate");
    fake.wait_call("sendMessage", text_has("unknown command /frobnicate")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_garbage_and_a_500_are_survived() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    fake.fail_next("sendMessage", Failure::Garbage);
    let (_bot, _) = start(&fake, &b, |_| {});
    let started = Instant::now();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "x.example")).await }
    });
    // The first post gets 429 (retry after 1 s), the second garbage; the third goes through.
    let posted = fake.wait_nth_call("sendMessage", 3, |_| true).await;
    let waited = posted.at.duration_since(started);
    assert!(waited >= Duration::from_secs(1), "retry_after honoured: {waited:?}");
    assert_eq!(fake.calls("sendMessage").len(), 3);

    // Now getUpdates fails with a 500 (teloxide itself waits 10 s on a 5xx), after which the
    // poller carries on and a button still works.
    let polls_before = fake.calls("getUpdates").len();
    fake.fail_next("getUpdates", Failure::ServerError);
    // Wake the current long poll so the next one hits the failure.
    fake.push_message(CHAT, "alice", "/help");
    fake.wait_call("sendMessage", text_has("Commands:")).await;
    fake.wait_nth_call("getUpdates", polls_before + 3, |_| true).await;
    let update = fake.push_callback(CHAT, "alice", 1, &button(&posted.body, "Allow once"));
    let out = waiter.await.unwrap();
    assert!(out.allows(), "{out:?}");
    assert!(fake.delivered_at(update).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_that_never_answers_is_abandoned_and_questions_are_posted_meanwhile() {
    let fake = FakeTelegram::start().await;
    fake.fail_next("getUpdates", Failure::Hang);
    let b = broker();
    // A poll may take 1 s (its timeout) + 1 s (the request timeout) before it is abandoned.
    let (_bot, _) = start(&fake, &b, |c| {
        c.poll_timeout = Duration::from_secs(1);
        c.request_timeout = Duration::from_secs(1);
    });
    let hung = fake.wait_nth_call("getUpdates", 1, |_| true).await;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "x.example")).await }
    });
    let q = fake.wait_call("sendMessage", text_has("x.example:443")).await;
    assert_eq!(fake.calls("getUpdates").len(), 1, "the question was posted while the poll hung");
    let next = fake.wait_nth_call("getUpdates", 2, |_| true).await;
    let abandoned = next.at.duration_since(hung.at);
    eprintln!("a hanging getUpdates is abandoned and polled again after {abandoned:?}");
    assert!(
        (Duration::from_millis(1900)..Duration::from_secs(4)).contains(&abandoned),
        "{abandoned:?}"
    );
    fake.push_callback(CHAT, "alice", 1, &button(&q.body, "Allow once"));
    assert!(waiter.await.unwrap().allows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_stay_answerable_when_telegram_is_unreachable() {
    let b = broker();
    // Port 1 on loopback: nothing listens, connections are refused at once.
    let mut c = config("http://127.0.0.1:1/");
    c.min_backoff = Duration::from_millis(20);
    let control = Arc::new(Control { revoked: Mutex::default() });
    let _bot = telegram::spawn(c, b.clone(), control).unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "x.example")).await }
    });
    let started = Instant::now();
    while b.pending().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::task::yield_now().await;
    }
    let id = b.pending()[0].id;
    b.answer(
        AnswerTarget::Question(id),
        Answer::Allow(Scope::Once),
        Responder::new(Channel::Cli, "root"),
    )
    .await
    .unwrap();
    assert!(waiter.await.unwrap().allows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_burst_becomes_a_handful_of_messages_with_counts() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (bot, _) = start(&fake, &b, |c| c.alert_window = Duration::from_millis(300));
    for _ in 0..1000 {
        assert!(bot.alert(AlertMessage {
            sandbox: "sb1".into(),
            key: "sb1 10.200.0.9:443/tcp".into(),
            text: "sb1 tried 10.200.0.9:443/tcp directly (blocked)".into(),
            count: 1,
        }));
    }
    let summary = fake.wait_call("sendMessage", text_has("999 more")).await;
    assert!(summary.body["text"].as_str().unwrap().contains("10.200.0.9:443"));
    let alerts: Vec<_> = fake
        .calls("sendMessage")
        .into_iter()
        .filter(|c| c.body["text"].as_str().is_some_and(|t| t.contains("10.200.0.9")))
        .collect();
    println!("1000 blocked packets -> {} alert messages", alerts.len());
    assert!(alerts.len() <= 3, "{:?}", alerts.iter().map(|c| &c.body["text"]).collect::<Vec<_>>());
    assert_eq!(bot.alerts_dropped(), 0);
}

#[tokio::test]
async fn a_bot_without_chats_is_refused() {
    let b = broker();
    let c = TelegramConfig::new(BotToken::new("123456:TEST-token").unwrap(), vec![]);
    let control = Arc::new(Control { revoked: Mutex::default() });
    let err = telegram::spawn(c, b, control).unwrap_err();
    assert!(err.to_string().contains("no Telegram chat ids"));
}

/// Issue 14: question ids restart at q1 with each daemon, and a button from before a restart
/// answered the new q1 (another host, another sandbox). Now it answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_from_before_a_restart_answers_nothing() {
    let fake = FakeTelegram::start().await;
    let old_broker = broker();
    let (old_bot, _) = start(&fake, &old_broker, |_| {});
    let _old = tokio::spawn({
        let b = old_broker.clone();
        async move { b.ask(question("sb-old", "old.example")).await }
    });
    let posted = fake.wait_call("sendMessage", text_has("old.example:443")).await;
    let stale = button(&posted.body, "Always");
    // The daemon restarts: a new broker (ids from q1 again) and a new bot.
    drop(old_bot);
    old_broker.shutdown();
    let b = broker();
    let (_bot, _) = start(&fake, &b, |_| {});
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb-new", "new.example")).await }
    });
    let fresh = fake.wait_call("sendMessage", text_has("new.example:443")).await;
    let id = b.pending()[0].id;
    assert_eq!(id.to_string(), "q1", "the new question has the old one's id");
    fake.push_callback(CHAT, "alice", 1, &stale);
    let ack = fake.wait_call("answerCallbackQuery", |_| true).await;
    let text = ack.body["text"].as_str().unwrap();
    assert!(text.contains("no longer pending"), "{text}");
    assert_eq!(b.pending().len(), 1, "the stale button answered the new q1");
    assert!(!waiter.is_finished());
    // The fresh button works.
    fake.push_callback(CHAT, "alice", 2, &button(&fresh.body, "Deny"));
    assert!(!waiter.await.unwrap().allows());
    assert!(b.pending().is_empty());
}

/// Issue 14: 310 direct connections to distinct destinations made 310 alerts. Per sandbox, at
/// most the budget of alerts per window, then one summary "and N more".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_blocked_destinations_make_the_budget_and_one_summary() {
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (bot, _) = start(&fake, &b, |c| {
        c.alert_window = Duration::from_millis(500);
        c.alerts_per_window = 10;
    });
    for i in 0..300 {
        assert!(bot.alert(AlertMessage {
            sandbox: "sb1".into(),
            key: format!("sb1 → 10.9.{}.{}:443/tcp", i / 256, i % 256),
            text: format!("sb1: blocked direct connection to 10.9.{}.{}:443/tcp", i / 256, i % 256),
            count: 1,
        }));
    }
    let summary = fake.wait_call("sendMessage", text_has("and 290 more")).await;
    let text = summary.body["text"].as_str().unwrap();
    assert!(text.contains("sb1") && text.contains("290 destinations"), "{text}");
    let sent = fake
        .calls("sendMessage")
        .into_iter()
        .filter(|c| {
            c.body["text"].as_str().is_some_and(|t| t.contains("10.9.") || t.contains("more"))
        })
        .count();
    println!("300 blocked destinations -> {sent} alert messages");
    assert_eq!(sent, 11, "{:?}", fake.summary());
    assert_eq!(bot.alert_counts(), vec![("sb1".to_owned(), 10, 290)]);
}

/// Issue 14: one sandbox posted 80 questions in 20 s. Past its budget, questions are denied
/// without being posted, and one message says how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eighty_questions_post_the_budget_and_one_summary() {
    let fake = FakeTelegram::start().await;
    let b = Broker::new(
        BrokerConfig {
            timeout: Duration::from_secs(60),
            max_open_per_sandbox: 1000,
            questions_per_minute: 20,
            budget_window: Duration::from_secs(3),
            ..Default::default()
        },
        None,
    );
    let (_bot, _) = start(&fake, &b, |_| {});
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..80 {
        let (b2, x) = (b.clone(), question("sb1", &format!("h{i}.example")));
        let h = tokio::spawn(async move { b2.ask(x).await });
        if i < 20 {
            held.push(h);
            // One at a time: the first twenty are the ones within the budget.
            let since = Instant::now();
            while b.pending().len() < i + 1 {
                assert!(since.elapsed() < Duration::from_secs(10), "question {i} not asked");
                tokio::task::yield_now().await;
            }
        } else if let Resolution::OverBudget { .. } = h.await.unwrap() {
            refused += 1;
        }
    }
    assert_eq!(refused, 60);
    let summary = fake.wait_call("sendMessage", text_has("and 60 more")).await;
    assert!(summary.body["text"].as_str().unwrap().contains("sandbox sb1"));
    let questions =
        fake.calls("sendMessage").into_iter().filter(|c| c.body.get("reply_markup").is_some());
    assert_eq!(questions.count(), 20, "{:?}", fake.summary());
    b.shutdown();
    drop(held);
}

/// `sandgate doctor`'s check: the bot's name when the API answers; why not (without the token)
/// when the token is wrong or nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reachable_names_the_bot_or_says_why_not() {
    let fake = FakeTelegram::start().await;
    let wait = Duration::from_secs(5);
    assert_eq!(
        telegram::reachable(&config(&fake.url), wait).await,
        Ok("@sandgate_test_bot".into())
    );
    let mut wrong = config(&fake.url);
    wrong.token = BotToken::new("654321:WRONG-token").unwrap();
    let e = telegram::reachable(&wrong, wait).await.unwrap_err();
    assert!(!e.contains("WRONG-token"), "{e}");
    assert_eq!(fake.bad_token(), 1);
    // Control: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let e = telegram::reachable(&config(&url), wait).await.unwrap_err();
    assert!(!e.contains("TEST-token"), "{e}");
}

/// Two machines, each with its own bot, share one group chat. Each question and alert names
/// its machine; an answer reaches only the machine it is for: a button press (even one
/// delivered to the wrong bot), `/allow@thisbot`, or a reply to this bot's question. A command
/// that names no bot gets a hint and answers nothing; a member not in `users` is refused. The
/// controls: the same answers addressed to the right bot, by a listed user, release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_machines_in_one_group_each_answer_only_their_own_questions() {
    const GROUP: i64 = -100_123;
    const ALICE: (i64, &str) = (7, "alice");
    const MALLORY: (i64, &str) = (666, "mallory");
    const TOKEN_A: &str = "111:laptop-token";
    const TOKEN_B: &str = "222:runner-token";
    let (fake_a, fake_b) = (
        FakeTelegram::start_bot(TOKEN_A, "laptop_bot").await,
        FakeTelegram::start_bot(TOKEN_B, "runner_bot").await,
    );
    let (a, b) = (broker(), broker());
    let group = |token: &str, name: &str| {
        let (token, name) = (token.to_owned(), name.to_owned());
        move |c: &mut TelegramConfig| {
            c.token = BotToken::new(token).unwrap();
            c.chats = vec![GROUP];
            c.users = vec![ALICE.0];
            c.name = name;
        }
    };
    let (bot_a, _) = start(&fake_a, &a, group(TOKEN_A, "alice@laptop"));
    let (_bot_b, _) = start(&fake_b, &b, group(TOKEN_B, "ci@runner"));
    // Everyone in the group sees what is typed there: both bots get it.
    let say = |from, text: &str, reply_to: Option<(i64, Value)>| {
        fake_a.push_group_message(GROUP, from, text, reply_to.clone());
        fake_b.push_group_message(GROUP, from, text, reply_to);
    };
    let ask = |b: &Broker, host: &str| {
        let (b, q) = (b.clone(), question("sb", host));
        tokio::spawn(async move { b.ask(q).await })
    };
    let wait_a = ask(&a, "shared.example");
    let wait_b = ask(&b, "shared.example");
    let q_a = fake_a.wait_call("sendMessage", text_has("shared.example:443")).await;
    let q_b = fake_b.wait_call("sendMessage", text_has("shared.example:443")).await;
    let text_of = |c: &fake_telegram::Call| c.body["text"].as_str().unwrap().to_owned();
    assert!(text_of(&q_a).starts_with("[alice@laptop] 🔒 sb wants"), "{}", text_of(&q_a));
    assert!(text_of(&q_b).starts_with("[ci@runner] 🔒 sb wants"), "{}", text_of(&q_b));
    assert_eq!(
        (q_a.body["chat_id"].as_i64(), q_b.body["chat_id"].as_i64()),
        (Some(GROUP), Some(GROUP))
    );
    assert!(bot_a.alert(AlertMessage {
        sandbox: "sb".into(),
        key: "sb 10.9.9.9:443/tcp".into(),
        text: "sb tried 10.9.9.9:443/tcp directly (blocked)".into(),
        count: 1,
    }));
    let alert = fake_a.wait_call("sendMessage", text_has("10.9.9.9")).await;
    assert!(text_of(&alert).starts_with("[alice@laptop] 🚫 sb tried"), "{}", text_of(&alert));
    let (msg_a, msg_b) = (q_a.message_id.unwrap(), q_b.message_id.unwrap());
    let (bot_of_a, bot_of_b) = (fake_a.bot(), fake_b.bot());

    // Named by no bot: each machine hints (to a listed user) and answers nothing.
    say(ALICE, "/allow shared.example", None);
    fake_a.wait_call("sendMessage", text_has("/allow@laptop_bot DOMAIN")).await;
    fake_b.wait_call("sendMessage", text_has("/allow@runner_bot DOMAIN")).await;
    // A member not in `users`, addressing A by name and pressing A's button: refused.
    say(MALLORY, "/allow@laptop_bot shared.example", None);
    fake_a.wait_call("sendMessage", text_has("Telegram user 666 may not answer")).await;
    let always_a = button(&q_a.body, "Always");
    fake_a.push_group_callback(GROUP, MALLORY, (msg_a, bot_of_a.clone()), &always_a);
    fake_a.wait_call("answerCallbackQuery", text_has("Telegram user 666 may not answer")).await;
    // A's button delivered to B (Telegram does not do that; B checks anyway): not B's.
    fake_b.push_group_callback(GROUP, ALICE, (msg_a, bot_of_a.clone()), &always_a);
    fake_b.wait_call("answerCallbackQuery", text_has("not under a question of this bot")).await;
    let status = |b: &Broker| b.pending().len();
    assert_eq!((status(&a), status(&b)), (1, 1), "nothing answered so far");

    // Addressed to A by name: only A allows.
    say(ALICE, "/allow@laptop_bot shared.example", None);
    let out = wait_a.await.unwrap();
    assert!(
        matches!(out, Resolution::Answered { answer: Answer::Allow(Scope::Session), .. }),
        "{out:?}"
    );
    // B handles updates in order: its reply to this proves it saw the /allow@laptop_bot first.
    say(ALICE, "/pending@runner_bot", None);
    fake_b.wait_call("sendMessage", text_has("1 pending:")).await;
    assert_eq!(status(&b), 1, "A's answer did not apply on B");
    assert!(fake_a.sent_containing("1 pending:").is_empty(), "A ignored B's command");

    // A reply to B's question: only B denies (A sees a reply to someone else's message).
    say(ALICE, "/deny shared.example", Some((msg_b, bot_of_b.clone())));
    let out = wait_b.await.unwrap();
    assert!(
        matches!(out, Resolution::Answered { answer: Answer::Deny(Scope::Session), .. }),
        "{out:?}"
    );

    // Control for the button check: B's own button, pressed by Alice, answers on B.
    let wait_b = ask(&b, "second.example");
    let q_b2 = fake_b.wait_call("sendMessage", text_has("second.example:443")).await;
    let once = button(&q_b2.body, "Allow once");
    fake_b.push_group_callback(GROUP, ALICE, (q_b2.message_id.unwrap(), bot_of_b), &once);
    let out = wait_b.await.unwrap();
    assert!(
        matches!(out, Resolution::Answered { answer: Answer::Allow(Scope::Once), .. }),
        "{out:?}"
    );
    assert!(a.pending().is_empty());
}

/// In a group chat with no `users` configured nobody may answer, whoever presses or types;
/// the same press in a private chat (its owner) answers — the control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_users_nobody_answers_in_a_group() {
    const GROUP: i64 = -100_555;
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (_bot, _) = start(&fake, &b, |c| c.chats = vec![GROUP, CHAT]);
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "g.example")).await }
    });
    let q = fake.wait_call("sendMessage", text_has("g.example:443")).await;
    let once = button(&q.body, "Allow once");
    fake.push_group_callback(GROUP, (CHAT, "alice"), (q.message_id.unwrap(), fake.bot()), &once);
    fake.wait_call("answerCallbackQuery", text_has("until `[telegram] users` lists")).await;
    fake.push_group_message(GROUP, (CHAT, "alice"), "/allow@sandgate_test_bot g.example", None);
    fake.wait_call("sendMessage", text_has("until `[telegram] users` lists")).await;
    assert_eq!(b.pending().len(), 1);
    fake.push_callback(CHAT, "alice", q.message_id.unwrap(), &once);
    let out = waiter.await.unwrap();
    assert!(
        matches!(out, Resolution::Answered { answer: Answer::Allow(Scope::Once), .. }),
        "{out:?}"
    );
}

/// Red team (issue 35): what reaches the bot in a shared group but is not a listed person's own
/// message or press answers nothing, even when `users` lists the id it arrives under (Telegram's
/// stand-ins for anonymous admins and channels, another machine's bot): a command an anonymous
/// admin or a channel sends, a bot's, a forwarded one, one composed by an inline bot, an edited
/// one, a message from a chat not configured; a press said to be a bot's, or under a message the
/// bot cannot see (`InaccessibleMessage`). Control: the same command typed by the listed person
/// answers (and, checked by hand, without the bot's check the relayed ones answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_listed_persons_own_message_answers_in_a_group() {
    use serde_json::json;
    const GROUP: i64 = -100_777;
    const ALICE: i64 = 7;
    const ANONYMOUS_ADMIN: i64 = 1_087_968_824; // GroupAnonymousBot
    const CHANNEL_BOT: i64 = 136_817_688; // Channel_Bot, for "send as channel"
    const BOT_B: &str = "222:runner-token";
    let fake = FakeTelegram::start().await;
    let b = broker();
    let (_bot, _) = start(&fake, &b, |c| {
        c.chats = vec![GROUP];
        // The ids a confused operator might list after reading "user 1087968824 may not answer".
        c.users = vec![ALICE, ANONYMOUS_ADMIN, CHANNEL_BOT, 222];
    });
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.ask(question("sb1", "g.example")).await }
    });
    let q = fake.wait_call("sendMessage", text_has("g.example:443")).await;
    let always = button(&q.body, "Always");
    let (msg, me) = (q.message_id.unwrap(), fake.bot());
    let group = json!({ "id": GROUP, "type": "supergroup", "title": "team" });
    let command = "/allow@sandgate_test_bot g.example always";
    let message = |from: Value, extra: Value| {
        let mut m = json!({
            "message_id": 9000, "date": 1_700_000_000, "chat": group, "from": from, "text": command,
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    let alice = fake_telegram::user(ALICE, "alice");
    let hostile = [
        message(
            json!({ "id": ANONYMOUS_ADMIN, "is_bot": true, "first_name": "Group",
                    "username": "GroupAnonymousBot" }),
            json!({ "sender_chat": group }),
        ),
        message(
            json!({ "id": CHANNEL_BOT, "is_bot": true, "first_name": "Channel",
                    "username": "Channel_Bot" }),
            json!({ "sender_chat": { "id": -100_999, "type": "channel", "title": "news" } }),
        ),
        message(fake_telegram::bot_user(BOT_B, "runner_bot"), json!({})),
        message(
            alice.clone(),
            json!({ "forward_origin": { "type": "hidden_user", "sender_user_name": "bob",
                                        "date": 1_699_999_999 } }),
        ),
        message(alice.clone(), json!({ "via_bot": fake_telegram::bot_user("333:x", "gif") })),
    ];
    for m in &hostile {
        fake.push_update(json!({ "message": m }));
    }
    fake.push_update(json!({ "edited_message": message(alice.clone(), json!({})) }));
    let mut private = message(alice.clone(), json!({}));
    private["chat"] = json!({ "id": ALICE, "type": "private", "first_name": "alice" });
    fake.push_update(json!({ "message": private }));
    let inaccessible = json!({ "chat": group, "message_id": msg, "date": 0 });
    for (from, message) in [
        (fake_telegram::bot_user(BOT_B, "runner_bot"), {
            let mut m = message(me.clone(), json!({}));
            m["message_id"] = json!(msg);
            m
        }),
        (alice.clone(), inaccessible),
    ] {
        fake.push_update(json!({ "callback_query": {
            "id": format!("cb-{}", from["id"]), "from": from, "chat_instance": "1",
            "message": message, "data": always,
        }}));
    }
    // Updates are handled in order: the reply to this proves every one above was handled.
    fake.push_update(json!({ "message": message(alice.clone(), json!({})) }));
    let out = waiter.await.unwrap();
    assert!(
        matches!(out, Resolution::Answered { answer: Answer::Allow(Scope::Always { .. }), .. }),
        "{out:?}"
    );
    // Replies go out in order: once Alice's is sent, so are the refusals queued before it.
    fake.wait_call("sendMessage", text_has("1 request released")).await;
    // The grant came from Alice's own message, the last one: each relayed command got a refusal.
    let refused = fake.sent_containing("only a listed person's own message can answer");
    assert_eq!(refused.len(), hostile.len(), "{refused:?}");
    let by = fake.wait_call("editMessageText", text_has("g.example")).await;
    assert!(fake_telegram::text(&by.body).contains("@alice"), "{}", by.body);
    let presses = fake.calls("answerCallbackQuery");
    assert_eq!(presses.len(), 2, "both presses refused: {presses:?}");
    assert!(
        presses.iter().all(|c| !fake_telegram::text(&c.body).contains("released")),
        "{presses:?}"
    );
}
