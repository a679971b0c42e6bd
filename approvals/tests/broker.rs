//! The broker's contract: coalescing, first answer wins, wildcards, timeouts, grants.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandgate_approvals::{
    Answer, AnswerError, AnswerTarget, Broker, BrokerConfig, BrokerEvent, Channel, Effect,
    GrantRequest, GrantTarget, GrantWriter, Question, QuestionId, Resolution, Responder,
    SandboxRef, Scope,
};

fn q(sandbox: &str, host: &str, port: u16) -> Question {
    Question {
        sandbox: sandbox.into(),
        host: host.into(),
        port,
        method: None,
        path: None,
        command: vec!["agent".into()],
        cwd: Some("/p".into()),
        project: Some(format!("proj-{sandbox}")),
        process: None,
    }
}

fn alice() -> Responder {
    Responder::new(Channel::Telegram, "@alice")
}

fn bob() -> Responder {
    Responder::new(Channel::Cli, "bob")
}

#[derive(Default)]
struct Recorder {
    grants: Mutex<Vec<GrantRequest>>,
    fail: bool,
    gate: Option<Arc<std::sync::Barrier>>,
}

impl GrantWriter for Recorder {
    fn write(&self, g: &GrantRequest) -> Result<String, String> {
        if let Some(gate) = &self.gate {
            gate.wait();
        }
        if self.fail {
            return Err("store full".into());
        }
        let mut v = self.grants.lock().unwrap();
        v.push(g.clone());
        Ok(format!("{}", v.len()))
    }
}

fn broker_with(writer: Arc<Recorder>, timeout: Duration) -> Broker {
    Broker::new(BrokerConfig { timeout, ..Default::default() }, Some(writer))
}

/// Waits until the broker shows `n` questions with `waiters` total waiters (signal, not sleep:
/// polls the broker's own state, yielding to the runtime).
async fn until_pending(b: &Broker, n: usize, waiters: usize) {
    let started = Instant::now();
    loop {
        let p = b.pending();
        if p.len() == n && p.iter().map(|q| q.waiters).sum::<usize>() == waiters {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "pending stuck at {p:?}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_asks_for_one_key_are_one_question() {
    let rec = Arc::new(Recorder::default());
    let b = broker_with(rec.clone(), Duration::from_secs(30));
    let mut events = b.subscribe();
    let waiters: Vec<_> = (0..100)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.ask(q("sb1", "Crates.io", 443)).await })
        })
        .collect();
    until_pending(&b, 1, 100).await;
    let pending = b.pending();
    assert_eq!(pending[0].question.host, "crates.io", "host normalised to lower case");
    let id = pending[0].id;

    let done = b.answer(AnswerTarget::Question(id), Answer::Allow(Scope::Session), alice()).await;
    let done = done.unwrap();
    assert_eq!(done.released.len(), 1);
    assert_eq!(done.grants, vec!["1"]);
    let want = Resolution::Answered {
        answer: Answer::Allow(Scope::Session),
        by: alice(),
        pattern: "crates.io".into(),
    };
    for w in waiters {
        assert_eq!(w.await.unwrap(), want);
    }
    assert!(b.pending().is_empty());
    // Exactly one Asked and one Answered event.
    assert!(matches!(events.recv().await.unwrap(), BrokerEvent::Asked(p) if p.id == id));
    assert!(
        matches!(events.recv().await.unwrap(), BrokerEvent::Answered { question, .. } if question.id == id)
    );
    assert!(events.try_recv().is_err());
    let grants = rec.grants.lock().unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].target, GrantTarget::Sandbox("sb1".into()));
    assert_eq!((grants[0].port, grants[0].effect), (Some(443), Effect::Allow));
}

#[tokio::test]
async fn different_keys_are_different_questions() {
    let b = Broker::new(BrokerConfig::default(), None);
    let asks = [q("sb1", "a.example", 443), q("sb1", "a.example", 80), q("sb2", "a.example", 443)];
    let handles: Vec<_> = asks
        .into_iter()
        .map(|x| {
            tokio::spawn({
                let b = b.clone();
                async move { b.ask(x).await }
            })
        })
        .collect();
    until_pending(&b, 3, 3).await;
    // One host answer (any sandbox) releases all three.
    let done = b
        .answer(
            AnswerTarget::Host { pattern: "a.example".into(), sandbox: None, any_port: false },
            Answer::Allow(Scope::Once),
            bob(),
        )
        .await
        .unwrap();
    assert_eq!(done.released.len(), 3);
    for h in handles {
        assert!(h.await.unwrap().allows());
    }
}

#[test]
fn questions_wait_60_s_by_default() {
    assert_eq!(BrokerConfig::default().timeout, Duration::from_secs(60));
}

#[tokio::test]
async fn a_question_times_out_as_a_denial_with_a_reason() {
    let b = Broker::new(
        BrokerConfig { timeout: Duration::from_millis(150), ..Default::default() },
        None,
    );
    let mut events = b.subscribe();
    let started = Instant::now();
    let (o1, o2) =
        tokio::join!(b.ask(q("sb", "slow.example", 443)), b.ask(q("sb", "slow.example", 443)));
    let waited = started.elapsed();
    assert_eq!(o1, Resolution::TimedOut { after: Duration::from_millis(150) });
    assert_eq!(o1, o2);
    assert!(!o1.allows());
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_secs(5), "{waited:?}");
    let reason = o1.denial_reason("slow.example", 443).unwrap();
    assert!(
        reason.contains("nobody answered") && reason.contains("sandgate allow slow.example"),
        "{reason}"
    );
    let BrokerEvent::Asked(p) = events.recv().await.unwrap() else { panic!("Asked first") };
    assert!(matches!(events.recv().await.unwrap(), BrokerEvent::TimedOut(t) if t.id == p.id));
    // Answering after the timeout: first "answer" (the timeout) won.
    let err = b
        .answer(AnswerTarget::Question(p.id), Answer::Allow(Scope::Once), alice())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AnswerError::AlreadyAnswered { how, by: None, .. } if how == "timed out"),
        "{err:?}"
    );
    assert!(b.pending().is_empty());
}

#[tokio::test]
async fn the_first_answer_wins_and_later_ones_learn_who() {
    let b = Broker::new(BrokerConfig::default(), None);
    let h = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    b.answer(AnswerTarget::Question(id), Answer::Deny(Scope::Session), bob()).await.unwrap();
    let err = b
        .answer(AnswerTarget::Question(id), Answer::Allow(Scope::Once), alice())
        .await
        .unwrap_err();
    match err {
        AnswerError::AlreadyAnswered { by: Some(by), how, .. } => {
            assert_eq!(by, bob());
            assert_eq!(how, "denied for this session in the CLI by bob");
        }
        other => panic!("{other:?}"),
    }
    let out = h.await.unwrap();
    assert!(!out.allows());
    assert!(
        out.denial_reason("x.example", 443)
            .unwrap()
            .contains("denied for this session in the CLI by bob")
    );
    assert!(matches!(
        b.answer(AnswerTarget::Question(QuestionId(999)), Answer::Allow(Scope::Once), bob()).await,
        Err(AnswerError::NotFound { id: QuestionId(999) })
    ));
}

#[tokio::test]
async fn a_wildcard_answer_releases_every_question_it_covers() {
    let rec = Arc::new(Recorder::default());
    let b = broker_with(rec.clone(), Duration::from_secs(30));
    let hosts = ["a.example.com", "b.c.example.com", "example.com", "other.org"];
    let handles: Vec<_> = hosts
        .iter()
        .map(|h| {
            tokio::spawn({
                let (b, x) = (b.clone(), q("sb1", h, 443));
                async move { b.ask(x).await }
            })
        })
        .collect();
    until_pending(&b, 4, 4).await;
    let done = b
        .answer(
            AnswerTarget::Host { pattern: "*.EXAMPLE.com".into(), sandbox: None, any_port: false },
            Answer::Allow(Scope::Always { global: false }),
            alice(),
        )
        .await
        .unwrap();
    let mut released: Vec<_> = done.released.iter().map(|p| p.question.host.as_str()).collect();
    released.sort();
    assert_eq!(released, vec!["a.example.com", "b.c.example.com"]);
    let left: Vec<_> = b.pending().into_iter().map(|p| p.question.host).collect();
    assert_eq!(left, vec!["example.com", "other.org"], "the apex is not covered by *.");
    // One project grant for the pattern, for the port the questions asked (issue 14: a pattern
    // answer used to open every port).
    let grants = rec.grants.lock().unwrap().clone();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].pattern, "*.example.com");
    assert_eq!(grants[0].port, Some(443));
    assert_eq!(grants[0].target, GrantTarget::Project("proj-sb1".into()));
    for h in handles.into_iter().take(2) {
        assert!(h.await.unwrap().allows());
    }
    // Too broad or malformed patterns are refused.
    for bad in ["*", "*.com", "a b"] {
        let err = b
            .answer(
                AnswerTarget::Host { pattern: bad.into(), sandbox: None, any_port: false },
                Answer::Allow(Scope::Once),
                alice(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, AnswerError::Pattern(_)), "{bad}: {err:?}");
    }
}

#[tokio::test]
async fn a_host_answer_can_be_limited_to_one_sandbox() {
    let b = Broker::new(BrokerConfig::default(), None);
    let h1 = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb1", "x.example", 443)).await }
    });
    let _h2 = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb2", "x.example", 443)).await }
    });
    until_pending(&b, 2, 2).await;
    let sandbox = Some(SandboxRef { id: "sb1".into(), project: None });
    let done = b
        .answer(
            AnswerTarget::Host { pattern: "x.example".into(), sandbox, any_port: false },
            Answer::Allow(Scope::Once),
            bob(),
        )
        .await
        .unwrap();
    assert_eq!(done.released.len(), 1);
    assert!(h1.await.unwrap().allows());
    assert_eq!(b.pending()[0].question.sandbox, "sb2");
}

#[tokio::test]
async fn answers_with_nothing_pending_become_grants_or_say_what_is_missing() {
    let rec = Arc::new(Recorder::default());
    let b = broker_with(rec.clone(), Duration::from_secs(30));
    let host = |p: &str, s: Option<SandboxRef>| AnswerTarget::Host {
        pattern: p.into(),
        sandbox: s,
        any_port: false,
    };
    let sb = || Some(SandboxRef { id: "sb9".into(), project: Some("proj9".into()) });
    let err =
        b.answer(host("a.example", None), Answer::Allow(Scope::Once), bob()).await.unwrap_err();
    assert!(matches!(err, AnswerError::NothingPending { .. }), "{err:?}");
    let err =
        b.answer(host("a.example", None), Answer::Allow(Scope::Session), bob()).await.unwrap_err();
    assert!(matches!(err, AnswerError::NeedsSandbox { .. }), "{err:?}");
    let err = b
        .answer(host("a.example", None), Answer::Allow(Scope::Always { global: false }), bob())
        .await
        .unwrap_err();
    assert!(matches!(err, AnswerError::NeedsProject { .. }), "{err:?}");
    assert!(rec.grants.lock().unwrap().is_empty(), "refused answers write nothing");

    let hour = Duration::from_secs(3600);
    b.answer(host("a.example", sb()), Answer::Allow(Scope::Session), bob()).await.unwrap();
    b.answer(host("b.example", None), Answer::Allow(Scope::For(hour)), bob()).await.unwrap();
    b.answer(host("c.example", sb()), Answer::Allow(Scope::For(hour)), bob()).await.unwrap();
    b.answer(host("d.example", sb()), Answer::Allow(Scope::Always { global: false }), bob())
        .await
        .unwrap();
    b.answer(host("e.example", None), Answer::Deny(Scope::Always { global: true }), bob())
        .await
        .unwrap();
    // A named sandbox without a known project: its own grant, not a global one.
    let no_project = Some(SandboxRef { id: "sb8".into(), project: None });
    b.answer(host("f.example", no_project), Answer::Allow(Scope::For(hour)), bob()).await.unwrap();
    let grants = rec.grants.lock().unwrap().clone();
    let got: Vec<_> = grants
        .iter()
        .map(|g| (g.pattern.as_str(), g.target.clone(), g.effect, g.expires.is_some()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a.example", GrantTarget::Sandbox("sb9".into()), Effect::Allow, false),
            ("b.example", GrantTarget::Global, Effect::Allow, true),
            ("c.example", GrantTarget::Project("proj9".into()), Effect::Allow, true),
            ("d.example", GrantTarget::Project("proj9".into()), Effect::Allow, false),
            ("e.example", GrantTarget::Global, Effect::Deny, false),
            ("f.example", GrantTarget::Sandbox("sb8".into()), Effect::Allow, true),
        ]
    );
    let for_grant = &grants[1];
    assert_eq!(for_grant.expires.unwrap().duration_since(for_grant.at).unwrap(), hour);
    assert_eq!(for_grant.by, bob());
}

#[tokio::test]
async fn a_failing_grant_writer_still_releases_and_reports() {
    let rec = Arc::new(Recorder { fail: true, ..Default::default() });
    let b = broker_with(rec, Duration::from_secs(30));
    let h = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    let done = b
        .answer(AnswerTarget::Question(id), Answer::Allow(Scope::Always { global: true }), alice())
        .await
        .unwrap();
    assert_eq!(done.grant_errors, vec!["store full"]);
    assert!(done.grants.is_empty());
    assert!(h.await.unwrap().allows());
}

/// A grant writer held inside `write` until the test lets it go: the moment the answer is being
/// stored, observed without a sleep.
struct HeldWriter {
    /// Told once the writer is inside `write`.
    inside: Mutex<std::sync::mpsc::Sender<()>>,
    /// Waited on before `write` returns.
    go: Mutex<std::sync::mpsc::Receiver<()>>,
    stored: Mutex<Vec<GrantRequest>>,
}

/// The test's ends of a [`HeldWriter`]: hears it is inside, lets it go.
struct HeldEnds {
    inside: std::sync::mpsc::Receiver<()>,
    go: std::sync::mpsc::Sender<()>,
}

impl HeldWriter {
    fn new() -> (Arc<HeldWriter>, HeldEnds) {
        let (inside_tx, inside) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let w = HeldWriter {
            inside: Mutex::new(inside_tx),
            go: Mutex::new(go_rx),
            stored: Mutex::default(),
        };
        (Arc::new(w), HeldEnds { inside, go })
    }
}

impl GrantWriter for HeldWriter {
    fn write(&self, g: &GrantRequest) -> Result<String, String> {
        let _ = self.inside.lock().unwrap().send(());
        let _ = self.go.lock().unwrap().recv();
        let mut v = self.stored.lock().unwrap();
        v.push(g.clone());
        Ok(v.len().to_string())
    }
}

/// Polls `fut` once: `Some` when it is ready now. A future that waits on a channel looks at the
/// channel when polled, so `None` says the value is not there (not merely not seen yet).
async fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match fut.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// Issue 32, part 6: a person's answer is stored before anything acknowledges it. While the
/// grant writer is held inside `write`, the waiting request is not released (its future, polled,
/// is still waiting), no `Answered` event is out (what the chat's edit, `watch` and the
/// launcher's notice react to) and `answer` has not returned (the chat's reply, the CLI's
/// exit); once the writer returns, all three happen. For each kind of answer a channel sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_stored_before_anything_acknowledges_it() {
    let host = |pattern: &str| AnswerTarget::Host {
        pattern: pattern.into(),
        sandbox: None,
        any_port: false,
    };
    let rows: [(&str, Option<AnswerTarget>, Answer); 4] = [
        ("a button: allow for the session", None, Answer::Allow(Scope::Session)),
        ("a button: deny", None, Answer::Deny(Scope::Session)),
        ("`/deny HOST` (a host)", Some(host("pkg.registry.example")), Answer::Deny(Scope::Session)),
        (
            "`sandgate allow '*.registry.example' --for 1h`",
            Some(host("*.registry.example")),
            Answer::Allow(Scope::For(Duration::from_secs(3600))),
        ),
    ];
    for (what, target, answer) in rows {
        let (writer, ends) = HeldWriter::new();
        let b = Broker::new(BrokerConfig::default(), Some(writer.clone()));
        let mut events = b.subscribe();
        let mut waiter = std::pin::pin!(b.ask(q("sb", "pkg.registry.example", 443)));
        assert!(poll_once(waiter.as_mut()).await.is_none(), "{what}: the request waits");
        let id = b.pending()[0].id;
        assert!(matches!(events.try_recv(), Ok(BrokerEvent::Asked(p)) if p.id == id), "{what}");
        let target = target.unwrap_or(AnswerTarget::Question(id));
        let answering = tokio::spawn({
            let b = b.clone();
            async move { b.answer(target, answer, alice()).await }
        });
        let HeldEnds { inside, go } = ends;
        let entered =
            tokio::task::spawn_blocking(move || inside.recv_timeout(Duration::from_secs(20)))
                .await
                .unwrap();
        if entered.is_err() {
            panic!("{what}: the writer was never called: {:?}", answering.await);
        }

        // Being stored: nothing has acknowledged it.
        assert!(poll_once(waiter.as_mut()).await.is_none(), "{what}: released before stored");
        assert!(
            matches!(events.try_recv(), Err(tokio::sync::broadcast::error::TryRecvError::Empty)),
            "{what}: published before stored"
        );
        assert!(!answering.is_finished(), "{what}: answered before stored");
        assert!(writer.stored.lock().unwrap().is_empty());

        go.send(()).unwrap();
        let done = answering.await.unwrap().unwrap();
        assert_eq!((done.grants.len(), done.released.len()), (1, 1), "{what}: {done:?}");
        assert_eq!(writer.stored.lock().unwrap().len(), 1, "{what}");
        let released = waiter.await;
        assert!(
            matches!(&released, Resolution::Answered { answer: a, .. } if *a == answer),
            "{what}: {released:?}"
        );
        assert!(
            matches!(events.try_recv(), Ok(BrokerEvent::Answered { question, .. }) if question.id == id),
            "{what}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_an_answer_is_being_recorded_others_lose_and_newcomers_join() {
    let gate = Arc::new(std::sync::Barrier::new(2));
    let rec = Arc::new(Recorder { gate: Some(gate.clone()), ..Default::default() });
    let b = broker_with(rec, Duration::from_secs(30));
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    let answering = tokio::spawn({
        let b = b.clone();
        async move { b.answer(AnswerTarget::Question(id), Answer::Allow(Scope::Session), alice()).await }
    });
    // The writer is now parked on the gate: the question is claimed, hidden from `pending`.
    let started = Instant::now();
    while !b.pending().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::task::yield_now().await;
    }
    let err =
        b.answer(AnswerTarget::Question(id), Answer::Deny(Scope::Once), bob()).await.unwrap_err();
    assert!(
        matches!(&err, AnswerError::AlreadyAnswered { by: Some(by), .. } if *by == alice()),
        "{err:?}"
    );
    // A request arriving now joins the claimed question instead of asking again.
    let late = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    while b.question(id).map(|p| p.waiters) != Some(2) {
        assert!(started.elapsed() < Duration::from_secs(10), "the late request did not join");
        tokio::task::yield_now().await;
    }
    tokio::task::spawn_blocking(move || gate.wait()).await.unwrap();
    answering.await.unwrap().unwrap();
    assert!(first.await.unwrap().allows());
    assert!(late.await.unwrap().allows());
}

#[tokio::test]
async fn a_waiter_that_leaves_does_not_end_the_question() {
    let b = Broker::new(BrokerConfig::default(), None);
    let gone = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    let stays = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    until_pending(&b, 1, 2).await;
    gone.abort();
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    b.answer(AnswerTarget::Question(id), Answer::Allow(Scope::Once), alice()).await.unwrap();
    assert!(stays.await.unwrap().allows());
}

#[tokio::test]
async fn shutdown_denies_waiters_as_closed() {
    let b = Broker::new(BrokerConfig::default(), None);
    let h = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb", "x.example", 443)).await }
    });
    until_pending(&b, 1, 1).await;
    assert_eq!(b.shutdown(), 1);
    let out = h.await.unwrap();
    assert_eq!(out, Resolution::Closed);
    assert!(out.denial_reason("x.example", 443).unwrap().contains("daemon stopped"));
    assert!(b.pending().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_cannot_open_more_questions_than_its_limit_even_all_at_once() {
    let config = BrokerConfig {
        timeout: Duration::from_secs(30),
        max_open_per_sandbox: 4,
        ..Default::default()
    };
    let b = Broker::new(config, None);
    // 50 different hosts from one sandbox at the same instant: exactly 4 questions.
    let asks: Vec<_> = (0..50)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { b.ask(q("sb1", &format!("h{i}.example"), 443)).await })
        })
        .collect();
    until_pending(&b, 4, 4).await;
    // Every ask has reached the broker once 46 have been answered (refused); only then is the
    // state below the one under test, not one where a late-starting task is still to come.
    let started = Instant::now();
    while asks.iter().filter(|a| a.is_finished()).count() < 46 {
        assert!(started.elapsed() < Duration::from_secs(10), "refusals never came");
        tokio::task::yield_now().await;
    }
    // Another sandbox still gets its own; a request for a host already asked about joins it.
    let other = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb2", "h0.example", 443)).await }
    });
    until_pending(&b, 5, 5).await;
    let join = tokio::spawn({
        let b = b.clone();
        let host = b.pending().into_iter().find(|p| p.question.sandbox == "sb1").unwrap();
        let host = host.question.host;
        async move { b.ask(q("sb1", &host, 443)).await }
    });
    until_pending(&b, 5, 6).await;
    b.shutdown();
    let mut refused = 0;
    for a in asks {
        match a.await.unwrap() {
            Resolution::TooManyQuestions { open } => {
                assert_eq!(open, 4);
                refused += 1;
            }
            Resolution::Closed => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused, 46);
    assert_eq!(other.await.unwrap(), Resolution::Closed);
    assert_eq!(join.await.unwrap(), Resolution::Closed);
    let reason = Resolution::TooManyQuestions { open: 4 }.denial_reason("x.example", 443).unwrap();
    assert!(reason.contains("4 questions waiting"), "{reason}");
}

/// Issue 14: answering a question about host:443 with `allow host` opened host:22 as well.
#[tokio::test]
async fn an_answer_grants_the_port_asked_unless_it_says_any_port() {
    let rec = Arc::new(Recorder::default());
    let b = broker_with(rec.clone(), Duration::from_secs(30));
    let host = |p: &str, any_port: bool| AnswerTarget::Host {
        pattern: p.into(),
        sandbox: Some(SandboxRef { id: "sb1".into(), project: Some("proj-sb1".into()) }),
        any_port,
    };
    let always = Answer::Allow(Scope::Always { global: false });
    // (questions open as host:port, the answer's pattern, --any-port, ports granted, released)
    type Row<'a> = (&'a [(&'a str, u16)], &'a str, bool, &'a [Option<u16>], usize);
    let rows: &[Row<'_>] = &[
        (&[("a.example", 443)], "a.example", false, &[Some(443)], 1),
        (&[("b.example", 443)], "b.example", true, &[None], 1),
        (&[("c.example", 443)], "c.example:443", false, &[Some(443)], 1),
        // A port typed that no question asked: nothing released, a grant for that port only.
        (&[("d.example", 443)], "d.example:22", false, &[Some(22)], 0),
        // Two questions on two ports, one wildcard answer: one grant per port.
        (
            &[("x.e.example", 443), ("y.e.example", 8443)],
            "*.e.example",
            false,
            &[Some(443), Some(8443)],
            2,
        ),
        // Nothing pending and no port: HTTPS only.
        (&[], "f.example", false, &[Some(443)], 0),
        (&[], "g.example:8080", false, &[Some(8080)], 0),
        (&[], "h.example", true, &[None], 0),
    ];
    for (asked, pattern, any_port, ports, released) in rows {
        rec.grants.lock().unwrap().clear();
        let waiting: Vec<_> = asked
            .iter()
            .map(|(h, p)| {
                let (b, x) = (b.clone(), q("sb1", h, *p));
                tokio::spawn(async move { b.ask(x).await })
            })
            .collect();
        until_pending(&b, asked.len(), asked.len()).await;
        let done = b.answer(host(pattern, *any_port), always, bob()).await.unwrap();
        assert_eq!(done.released.len(), *released, "{pattern}");
        let mut got: Vec<Option<u16>> = rec.grants.lock().unwrap().iter().map(|g| g.port).collect();
        got.sort();
        assert_eq!(got, ports.to_vec(), "{pattern} any_port={any_port}");
        assert!(rec.grants.lock().unwrap().iter().all(|g| !g.pattern.contains(':')), "{pattern}");
        for w in waiting.into_iter().take(*released) {
            assert!(w.await.unwrap().allows());
        }
        // Leave nothing open for the next row.
        for p in b.pending() {
            let _ = b.answer(AnswerTarget::Question(p.id), Answer::Deny(Scope::Once), bob()).await;
        }
    }
    // A question's own answer (a button, `allow q3`) is for its port.
    rec.grants.lock().unwrap().clear();
    let w = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb1", "ssh.example", 22)).await }
    });
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    b.answer(AnswerTarget::Question(id), always, alice()).await.unwrap();
    assert!(w.await.unwrap().allows());
    assert_eq!(rec.grants.lock().unwrap()[0].port, Some(22));
}

/// Issue 17: `once` covered only the requests waiting at the answer; cargo's second connection a
/// second later asked again. It now lasts ONCE_WINDOW, for that sandbox, host and port.
#[tokio::test]
async fn once_is_a_short_grant_for_that_sandbox_host_and_port() {
    let rec = Arc::new(Recorder::default());
    let b = broker_with(rec.clone(), Duration::from_secs(30));
    let w = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb1", "o.example", 443)).await }
    });
    until_pending(&b, 1, 1).await;
    let id = b.pending()[0].id;
    b.answer(AnswerTarget::Question(id), Answer::Allow(Scope::Once), alice()).await.unwrap();
    assert!(w.await.unwrap().allows());
    let g = rec.grants.lock().unwrap()[0].clone();
    assert_eq!(g.target, GrantTarget::Sandbox("sb1".into()));
    assert_eq!(g.port, Some(443));
    assert_eq!(g.expires, Some(g.at + sandgate_approvals::ONCE_WINDOW));
    assert_eq!(sandgate_approvals::ONCE_WINDOW, Duration::from_secs(10));
}

/// Issue 14: 80 questions in 20 s from one sandbox. Past its budget a question is denied at once
/// without being asked, with a reason for the model, and one summary event follows the window.
#[tokio::test]
async fn a_sandbox_past_its_question_budget_is_denied_without_asking() {
    let b = Broker::new(
        BrokerConfig {
            timeout: Duration::from_secs(30),
            max_open_per_sandbox: 1000,
            questions_per_minute: 20,
            // Long enough that the 80 asks below all fall in one window on a loaded machine.
            budget_window: Duration::from_secs(5),
            ..Default::default()
        },
        None,
    );
    let mut events = b.subscribe();
    let mut waiting = Vec::new();
    let mut over = 0;
    for i in 0..80 {
        let x = q("sb1", &format!("h{i}.example"), 443);
        let b2 = b.clone();
        let h = tokio::spawn(async move { b2.ask(x).await });
        if i < 20 {
            waiting.push(h);
            until_pending(&b, i + 1, i + 1).await;
        } else {
            let out = h.await.unwrap();
            let Resolution::OverBudget { limit, .. } = &out else { panic!("{i}: {out:?}") };
            assert_eq!(*limit, 20);
            let why = out.denial_reason("h.example", 443).unwrap();
            assert!(why.contains("denied without asking"), "{why}");
            over += 1;
        }
    }
    assert_eq!((b.pending().len(), over), (20, 60));
    // Another sandbox has its own budget.
    let other = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb2", "h.example", 443)).await }
    });
    until_pending(&b, 21, 21).await;
    let stats = b.budgets();
    assert_eq!((stats[0].sandbox.as_str(), stats[0].asked, stats[0].refused), ("sb1", 20, 60));
    // Exactly one summary for the window, with the count.
    let mut asked = 0;
    let summary = loop {
        match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
            Ok(Ok(BrokerEvent::Asked(_))) => asked += 1,
            Ok(Ok(BrokerEvent::OverBudget { sandbox, refused, limit, .. })) => {
                break (sandbox, refused, limit);
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(asked, 21, "only the questions within the budget were asked");
    assert_eq!(summary, ("sb1".to_owned(), 60, 20));
    // The window ended: the budget is back.
    let again = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb1", "later.example", 443)).await }
    });
    until_pending(&b, 22, 22).await;
    b.shutdown();
    drop((waiting, other, again));
}

/// Red team: sandboxes cost nothing, so one per question would get around a per-sandbox budget.
/// All sandboxes of the user share a budget too: 10 sandboxes asking 3 questions each against a
/// total of 12 get 12 questions asked and 18 denied without asking.
#[tokio::test]
async fn many_sandboxes_share_one_budget() {
    let b = Broker::new(
        BrokerConfig {
            timeout: Duration::from_secs(30),
            max_open_per_sandbox: 1000,
            questions_per_minute: 5,
            questions_per_minute_total: 12,
            // Long enough that all asks below fall in one window on a loaded machine.
            budget_window: Duration::from_secs(600),
            ..Default::default()
        },
        None,
    );
    let mut waiting = Vec::new();
    let mut over = 0;
    for i in 0..30 {
        let x = q(&format!("sb{}", i / 3), &format!("h{i}.example"), 443);
        let b2 = b.clone();
        let h = tokio::spawn(async move { b2.ask(x).await });
        if i < 12 {
            waiting.push(h);
            until_pending(&b, i + 1, i + 1).await;
        } else {
            let out = h.await.unwrap();
            let Resolution::OverBudget { limit, .. } = &out else { panic!("{i}: {out:?}") };
            assert_eq!(*limit, 12, "the shared budget refused it");
            over += 1;
        }
    }
    assert_eq!((b.pending().len(), over), (12, 18));
    // Each sandbox's own budget still applies below the total.
    assert_eq!(BrokerConfig::default().questions_per_minute_total, 60);
    b.shutdown();
    drop(waiting);
}

/// Issue 17: a question whose sandbox was killed stayed in `pending` until it timed out.
#[tokio::test]
async fn a_sandbox_that_ends_withdraws_its_questions_at_once() {
    let b =
        Broker::new(BrokerConfig { timeout: Duration::from_secs(600), ..Default::default() }, None);
    let mut events = b.subscribe();
    let mine = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb1", "a.example", 443)).await }
    });
    let _theirs = tokio::spawn({
        let b = b.clone();
        async move { b.ask(q("sb2", "a.example", 443)).await }
    });
    until_pending(&b, 2, 2).await;
    assert_eq!(b.withdraw_sandbox("sb1"), 1);
    assert_eq!(mine.await.unwrap(), Resolution::Closed);
    let left: Vec<_> = b.pending().into_iter().map(|p| p.question.sandbox).collect();
    assert_eq!(left, vec!["sb2"]);
    let withdrawn = loop {
        match events.recv().await.unwrap() {
            BrokerEvent::Withdrawn(p) => break p,
            BrokerEvent::Asked(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(withdrawn.question.sandbox, "sb1");
    // An answer to it now says how it ended.
    let err = b
        .answer(AnswerTarget::Question(withdrawn.id), Answer::Allow(Scope::Once), bob())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its sandbox ended"), "{err}");
}

#[test]
fn each_broker_has_its_own_run_id() {
    let ids: std::collections::HashSet<u64> =
        (0..8).map(|_| Broker::new(BrokerConfig::default(), None).run_id()).collect();
    assert_eq!(ids.len(), 8);
}

/// JSON carries question ids as `"q12"`; `q12`, `12` and the number 12 (older clients) parse.
#[test]
fn question_ids_are_strings_in_json() {
    assert_eq!(serde_json::to_value(QuestionId(12)).unwrap(), serde_json::json!("q12"));
    for form in [r#""q12""#, r#""12""#, "12"] {
        assert_eq!(serde_json::from_str::<QuestionId>(form).unwrap(), QuestionId(12), "{form}");
    }
    for bad in [r#""g12""#, r#""q""#, r##""#12""##, "-1"] {
        assert!(serde_json::from_str::<QuestionId>(bad).is_err(), "{bad}");
    }
}

/// Refuses allow grants for hosts under `.blocked.example`, as the daemon's managed-layer screen
/// does for what the organisation's policy forbids.
struct BlockedScreen;

impl sandgate_approvals::AnswerScreen for BlockedScreen {
    fn screen(&self, g: &GrantRequest) -> Result<(), String> {
        if g.effect == Effect::Allow && g.pattern.ends_with("blocked.example") {
            return Err(format!("{} is blocked by your organisation's policy", g.pattern));
        }
        Ok(())
    }
}

/// An allow answer the screen refuses is refused to the person, whatever the channel and scope:
/// nothing is stored, the question stays open for another answer (a deny still goes through).
/// Control: the same answers without the screen are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screened_answer_is_refused_and_nothing_is_stored() {
    for screened in [true, false] {
        let rec = Arc::new(Recorder::default());
        let b = broker_with(rec.clone(), Duration::from_secs(30));
        if screened {
            assert!(b.set_screen(Arc::new(BlockedScreen)));
        }
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.ask(q("sb1", "x.blocked.example", 443)).await })
        };
        until_pending(&b, 1, 1).await;
        let id = b.pending()[0].id;
        let always_global = Answer::Allow(Scope::Always { global: true });
        let attempts = [
            (AnswerTarget::Question(id), Answer::Allow(Scope::Once), alice()),
            (
                AnswerTarget::Host {
                    pattern: "*.blocked.example".into(),
                    sandbox: None,
                    any_port: true,
                },
                always_global,
                bob(),
            ),
        ];
        for (target, answer, by) in attempts {
            let r = b.answer(target, answer, by).await;
            if screened {
                let e = r.unwrap_err();
                assert!(matches!(e, AnswerError::Blocked(_)), "{e}");
                assert!(e.to_string().contains("blocked by your organisation's policy"), "{e}");
            } else {
                r.unwrap();
                break; // the question is answered
            }
        }
        if screened {
            assert!(rec.grants.lock().unwrap().is_empty());
            assert_eq!(b.pending().len(), 1, "still open");
            let done = b.answer(AnswerTarget::Question(id), Answer::Deny(Scope::Once), bob()).await;
            assert_eq!(done.unwrap().released.len(), 1);
        } else {
            assert_eq!(rec.grants.lock().unwrap().len(), 1);
        }
        waiter.await.unwrap();
    }
}
