//! The broker: one open question per (sandbox, host, port), however many requests wait on it.
//!
//! Lifecycle of a question:
//! 1. [`Broker::ask`] by the first request creates it (and publishes [`BrokerEvent::Asked`]);
//!    later requests for the same key join it.
//! 2. It ends exactly once, by whichever comes first:
//!    - an answer ([`Broker::answer`]) from any channel: it is *claimed* (a second answer now
//!      gets [`AnswerError::AlreadyAnswered`]), the grants are persisted through the
//!      [`GrantWriter`], then every waiter is released with the same [`Resolution`] and
//!      [`BrokerEvent::Answered`] is published (see "Stored, then acknowledged" below);
//!    - its deadline (first ask + timeout): every waiter gets [`Resolution::TimedOut`] (a denial)
//!      and [`BrokerEvent::TimedOut`] is published.
//!
//!    - its sandbox ending ([`Broker::withdraw_sandbox`]): every waiter gets [`Resolution::Closed`]
//!      and [`BrokerEvent::Withdrawn`] is published, so it leaves `pending` at once.
//!
//! A waiter that goes away (the client hung up) does not end the question: it stays answerable
//! until its deadline, so an answer still becomes a grant the retried request will find.
//!
//! # Stored, then acknowledged
//!
//! A person's answer is stored before anything acknowledges it, whatever the channel: the
//! [`GrantWriter`] has returned for every grant of the answer before a waiter is released (the
//! request goes on, or gets its 403), before [`BrokerEvent::Answered`] is published (the chat's
//! edit, the launcher's and `watch`'s lines) and before [`Broker::answer`] returns (the chat's
//! reply, the button's toast, the CLI's exit). So a crash right after any acknowledgement loses
//! nothing the person was told. This order lives here, in [`Broker::answer`] alone: the
//! channels only react to its result and its event. A grant the writer could not store is
//! named in [`Answered::grant_errors`], which every channel shows with its acknowledgement; the
//! waiters still get the person's answer (a store failure must not hold them, nor turn an
//! allow into a denial).
//!
//! Budgets: a sandbox may open at most [`BrokerConfig::questions_per_minute`] new questions per
//! [`BrokerConfig::budget_window`]; past it a new question is not asked but denied at once
//! ([`Resolution::OverBudget`], whose reason tells the model why), and once the window ends one
//! [`BrokerEvent::OverBudget`] says how many were refused (one chat message, not eighty).
//!
//! Ports: an answer grants the port that was asked (a pattern answer: each released question's
//! port; nothing pending: the port typed as `host:port`, else 443) unless it says "any port".
//!
//! Question ids restart at `q1` with each broker; [`Broker::run_id`] is random per broker, so a
//! channel that keeps references across restarts (a chat's buttons) can tell a stale one.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
// A grant's words are the config crate's, the very types the store keeps (no conversion between
// twins in the daemon).
pub use sandgate_config::{Effect, GrantTarget};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::pattern::{AnswerPattern, PatternError};
use crate::scope::{Answer, Responder, Scope, format_duration};

/// Broker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerConfig {
    /// How long a question waits for an answer before it is denied (default 60 s).
    pub timeout: Duration,
    /// Events buffered per subscriber.
    pub event_capacity: usize,
    /// Most questions one sandbox may have open at once; a new one past it is refused at once
    /// ([`Resolution::TooManyQuestions`]). Requests for a question already open still join it.
    pub max_open_per_sandbox: usize,
    /// Most new questions one sandbox may open per [`budget_window`](Self::budget_window);
    /// past it a new question is denied without asking ([`Resolution::OverBudget`]).
    pub questions_per_minute: u32,
    /// The budget's window (a minute; shorter in tests).
    pub budget_window: Duration,
    /// Most new questions all sandboxes together may open per
    /// [`budget_window`](Self::budget_window) (the daemon is per user): sandboxes cost nothing
    /// to start, so a per-sandbox budget alone does not bound what a person is asked.
    pub questions_per_minute_total: u32,
}

/// The default of [`BrokerConfig::questions_per_minute_total`]: three sandboxes' worth.
pub const DEFAULT_QUESTIONS_PER_MINUTE_TOTAL: u32 = 60;

/// The default of [`BrokerConfig::questions_per_minute`]: enough for a build that meets a few
/// new registries at once, far below a flood a person could not read.
pub const DEFAULT_QUESTIONS_PER_MINUTE: u32 = 20;

/// How long an `once` answer keeps covering the same sandbox's requests to the same host and
/// port: real clients (cargo, pip) open a second connection a moment after the first.
pub const ONCE_WINDOW: Duration = Duration::from_secs(10);

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            timeout: Duration::from_secs(60),
            event_capacity: 256,
            max_open_per_sandbox: 16,
            questions_per_minute: DEFAULT_QUESTIONS_PER_MINUTE,
            budget_window: Duration::from_secs(60),
            questions_per_minute_total: DEFAULT_QUESTIONS_PER_MINUTE_TOTAL,
        }
    }
}

/// A held request, as the proxy describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The sandbox asking.
    pub sandbox: String,
    /// The normalised destination host.
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// HTTP method, when known (plain HTTP or intercepted TLS; not for CONNECT).
    pub method: Option<String>,
    /// Request path, when known.
    pub path: Option<String>,
    /// The sandbox's command line.
    pub command: Vec<String>,
    /// The sandbox's working directory.
    pub cwd: Option<PathBuf>,
    /// The sandbox's project key, for `always` grants.
    pub project: Option<String>,
    /// The process in the sandbox that opened the connection, when it was found in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<sandgate_config::ProcessInfo>,
}

/// A question's id, unique for the broker's life. Written `q12` everywhere (terminal, chat,
/// JSON: every id sandgate prints is a string); read as `q12` or `12`, and as the number 12 from
/// JSON written by older clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuestionId(pub u64);

impl Serialize for QuestionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for QuestionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Number(u64),
            Text(String),
        }
        match Wire::deserialize(d)? {
            Wire::Number(n) => Ok(QuestionId(n)),
            Wire::Text(t) => t.parse().map_err(|_| {
                serde::de::Error::custom(format!("{t:?} is not a question id (q3, or 3)"))
            }),
        }
    }
}

impl std::fmt::Display for QuestionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "q{}", self.0)
    }
}

impl std::str::FromStr for QuestionId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix('q').unwrap_or(s).parse().map(QuestionId)
    }
}

/// An open question as the channels show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingQuestion {
    /// Its id.
    pub id: QuestionId,
    /// What the first request asked (method and path are those of the first request).
    #[serde(flatten)]
    pub question: Question,
    /// When it was first asked (epoch milliseconds on the wire).
    #[serde(with = "crate::epoch_ms")]
    pub first_asked: SystemTime,
    /// When it will be denied if nobody answers (epoch milliseconds on the wire).
    #[serde(with = "crate::epoch_ms")]
    pub deadline: SystemTime,
    /// Requests waiting on it now.
    pub waiters: usize,
}

/// What a waiting request learns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resolution {
    /// A person answered.
    Answered {
        /// The answer.
        answer: Answer,
        /// Who, where.
        by: Responder,
        /// The pattern answered (the host itself, or a wildcard covering it).
        pattern: String,
    },
    /// Nobody answered in time: deny.
    TimedOut {
        /// How long the question was open.
        after: Duration,
    },
    /// The broker shut down before an answer: deny.
    Closed,
    /// Not asked: the sandbox has this many questions open already: deny.
    TooManyQuestions {
        /// How many are open.
        open: usize,
    },
    /// Not asked: the sandbox opened its budget of questions in the current window: deny.
    OverBudget {
        /// The budget (questions per window).
        limit: u32,
        /// The window.
        window: Duration,
    },
}

impl Resolution {
    /// Whether the request may proceed.
    pub fn allows(&self) -> bool {
        match self {
            Resolution::Answered { answer, .. } => answer.allows(),
            Resolution::TimedOut { .. }
            | Resolution::Closed
            | Resolution::TooManyQuestions { .. }
            | Resolution::OverBudget { .. } => false,
        }
    }

    /// A sentence for the proxy's 403 body, written for the model reading it, or `None` when
    /// the outcome allows.
    pub fn denial_reason(&self, host: &str, port: u16) -> Option<String> {
        match self {
            Resolution::Answered { answer: Answer::Allow(_), .. } => None,
            Resolution::Answered { answer: Answer::Deny(scope), by, pattern } => Some(format!(
                "Access to {host}:{port} was denied {scope} {by} (rule {pattern}). Do not retry; \
                 ask the user if this destination is needed."
            )),
            Resolution::TimedOut { after } => Some(format!(
                "Access to {host}:{port} needs approval and nobody answered within {}. A retry \
                 asks the user again (and waits as long); better, ask the user to run \
                 `sandgate allow {host}:{port}` (or answer in Telegram) first.",
                format_duration(*after)
            )),
            Resolution::OverBudget { limit, window } => Some(format!(
                "Access to {host}:{port} needs approval, but this sandbox (or all sandboxes of \
                 this user together) already asked {limit} questions in the last {}, the \
                 budget, so this one was denied without asking the user. Do not try other hosts; tell the user which destinations you need.",
                format_duration(*window)
            )),
            Resolution::TooManyQuestions { open } => Some(format!(
                "Access to {host}:{port} needs approval, and this sandbox already has {open} \
                 questions waiting for the user, so none was asked. Wait for them to be \
                 answered, then retry once."
            )),
            Resolution::Closed => Some(format!(
                "Access to {host}:{port} needs approval but the sandgate daemon stopped before \
                 an answer. Retry once it is running again."
            )),
        }
    }
}

/// What an answer applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AnswerTarget {
    /// One question (a button, a key press, `sandgate allow --id`).
    Question(QuestionId),
    /// Every open question whose host matches `pattern` (`example.com` or `*.example.com`,
    /// optionally with `:port`: then only questions about that port), of one sandbox if given;
    /// also persists a grant when nothing is pending (`sandgate allow crates.io --for 1h`).
    /// The grants are for the ports asked (nothing pending: the port typed, else 443) unless
    /// `any_port`.
    Host {
        /// The pattern the person typed (`host`, `*.domain`, `host:port`).
        pattern: String,
        /// Restrict to this sandbox (and target its session/project when nothing is pending).
        sandbox: Option<SandboxRef>,
        /// Grant every port of the host, not only the one asked.
        #[serde(default)]
        any_port: bool,
    },
}

/// A sandbox named in an answer, with its project (from the store) for `always` grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRef {
    /// Sandbox id.
    pub id: String,
    /// Its project key.
    pub project: Option<String>,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The question was answered (or timed out) already: first answer wins.
    #[error("question {id} was already {how}")]
    AlreadyAnswered {
        /// The question.
        id: QuestionId,
        /// "allowed once in Telegram by @bob", "timed out".
        how: String,
        /// Who answered, when a person did.
        by: Option<Responder>,
    },
    /// No such question (unknown id, or too old to remember).
    #[error("no open question {id}; see `sandgate pending`")]
    NotFound {
        /// The id asked for.
        id: QuestionId,
    },
    /// The pattern is malformed or too broad.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// The [`AnswerScreen`] refused it (the organisation's policy forbids it); nothing was
    /// answered or stored.
    #[error("not answered: {0}")]
    Blocked(String),
    /// `once` means "the requests waiting now", and none matches.
    #[error(
        "nothing pending matches {pattern}; `once` applies only to waiting requests (use --for, --session or --always)"
    )]
    NothingPending {
        /// The pattern given.
        pattern: String,
    },
    /// A session answer with nothing pending needs a sandbox.
    #[error("nothing pending matches {pattern}; a session grant needs --sandbox ID")]
    NeedsSandbox {
        /// The pattern given.
        pattern: String,
    },
    /// An `always` (project) answer with nothing pending needs a sandbox with a project.
    #[error(
        "nothing pending matches {pattern}; say --global, or --sandbox ID of a sandbox with a project"
    )]
    NeedsProject {
        /// The pattern given.
        pattern: String,
    },
}

/// The result of an accepted answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The questions it released (their waiters are running again).
    pub released: Vec<PendingQuestion>,
    /// Ids of the grants the [`GrantWriter`] recorded.
    pub grants: Vec<String>,
    /// Grants that could not be recorded (the answer still released the waiters).
    pub grant_errors: Vec<String>,
}

/// A grant for the daemon to persist, derived from an answer:
///
/// | scope            | target                                                        |
/// |------------------|---------------------------------------------------------------|
/// | `Once`           | each released question's sandbox (record it as consumed)      |
/// | `Session`        | each released question's sandbox, or the named sandbox        |
/// | `For(d)`         | each released question's project (its sandbox when it has none); the named sandbox's project; else global. Expires at `at + d` |
/// | `Always{false}`  | each released question's project (sandbox when none), or the named sandbox's project |
/// | `Always{true}`   | global                                                        |
///
/// `Once` grants expire [`ONCE_WINDOW`] after the answer. The port is the one each released
/// question asked; with nothing released, the one typed (`host:port`), else 443; `None` (every
/// port) only when the person said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRequest {
    /// Host pattern (validated, without a port).
    pub pattern: String,
    /// Port, or `None` for every port (`--any-port`).
    pub port: Option<u16>,
    /// Allow or deny.
    pub effect: Effect,
    /// The answer's scope.
    pub scope: Scope,
    /// Whom it covers.
    pub target: GrantTarget,
    /// When it stops applying (`For` answers; epoch milliseconds on the wire).
    #[serde(with = "crate::epoch_ms::option")]
    pub expires: Option<SystemTime>,
    /// Who answered.
    pub by: Responder,
    /// When (epoch milliseconds on the wire).
    #[serde(with = "crate::epoch_ms")]
    pub at: SystemTime,
}

/// Screens the grants an answer would make before anything is claimed or stored: the daemon's
/// implementation refuses an allow answer that the managed layer (`/etc/sandgate/managed.toml`)
/// forbids, whichever channel it came from, and the refusal is what the person is told.
pub trait AnswerScreen: Send + Sync + 'static {
    /// `Err` with the reason to show when `grant` must not be made.
    fn screen(&self, grant: &GrantRequest) -> Result<(), String>;
}

/// Persists grants; the daemon implements it over the store. Called on a blocking thread.
pub trait GrantWriter: Send + Sync + 'static {
    /// Records `grant`; returns its id.
    fn write(&self, grant: &GrantRequest) -> Result<String, String>;
}

/// What the channels hear about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerEvent {
    /// A new question.
    Asked(PendingQuestion),
    /// A question was answered.
    Answered {
        /// The question, as it was.
        question: PendingQuestion,
        /// The answer.
        answer: Answer,
        /// Who, where.
        by: Responder,
        /// The pattern answered.
        pattern: String,
    },
    /// A question timed out (denied).
    TimedOut(PendingQuestion),
    /// A question ended because its sandbox ended (nobody is waiting for an answer any more).
    Withdrawn(PendingQuestion),
    /// A sandbox went past its question budget in a window that has now ended: one summary.
    OverBudget {
        /// The sandbox.
        sandbox: String,
        /// Questions denied without asking in that window.
        refused: u64,
        /// The budget.
        limit: u32,
        /// The window.
        window: Duration,
    },
}

/// A sandbox's question budget, as `sandgate status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStats {
    /// The sandbox.
    pub sandbox: String,
    /// Questions it opened (since the daemon started).
    pub asked: u64,
    /// Questions denied without asking, past its budget.
    pub refused: u64,
    /// Questions opened in the current window.
    pub asked_in_window: u32,
}

/// One sandbox's budget state.
struct Budget {
    window_start: Instant,
    asked_in_window: u32,
    refused_in_window: u64,
    asked: u64,
    refused: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    sandbox: String,
    host: String,
    port: u16,
}

struct Open {
    info: PendingQuestion,
    deadline: Instant,
    claimed: Option<Responder>,
    tx: watch::Sender<Option<Resolution>>,
}

/// How a closed question ended, remembered for `AlreadyAnswered`.
struct Closed {
    id: QuestionId,
    how: String,
    by: Option<Responder>,
}

/// An answer's claim: the questions it took and the grants to store for it.
struct Claim {
    ids: Vec<QuestionId>,
    requests: Vec<GrantRequest>,
    pattern: String,
}

#[derive(Default)]
struct State {
    next_id: u64,
    by_key: HashMap<Key, QuestionId>,
    open: HashMap<QuestionId, Open>,
    closed: VecDeque<Closed>,
    budgets: HashMap<String, Budget>,
    /// All sandboxes' budget together (its `refused` counts are unused: refusals are counted
    /// and summarised per sandbox).
    total: Option<Budget>,
}

const CLOSED_MEMORY: usize = 1024;

impl State {
    fn close(&mut self, id: QuestionId, how: String, by: Option<Responder>) -> Option<Open> {
        let open = self.open.remove(&id)?;
        let q = &open.info.question;
        let key = Key { sandbox: q.sandbox.clone(), host: q.host.clone(), port: q.port };
        if self.by_key.get(&key) == Some(&id) {
            self.by_key.remove(&key);
        }
        if self.closed.len() >= CLOSED_MEMORY {
            self.closed.pop_front();
        }
        self.closed.push_back(Closed { id, how, by });
        Some(open)
    }
}

/// What the [`Broker`] handles share: the configuration, the run number, the open questions and
/// answers (`State`), the event channel and the grant writer.
struct BrokerShared {
    config: BrokerConfig,
    run: u64,
    state: Mutex<State>,
    events: broadcast::Sender<BrokerEvent>,
    writer: Option<Arc<dyn GrantWriter>>,
    screen: std::sync::OnceLock<Arc<dyn AnswerScreen>>,
}

/// The approvals broker. Cheap to clone; clones share the questions.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<BrokerShared>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker that persists grants through `writer` (`None`: answers release waiters only).
    pub fn new(config: BrokerConfig, writer: Option<Arc<dyn GrantWriter>>) -> Self {
        let (events, _) = broadcast::channel(config.event_capacity.max(1));
        let run = random_u64();
        Broker {
            inner: Arc::new(BrokerShared {
                config,
                run,
                state: Mutex::default(),
                events,
                writer,
                screen: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Screens every answer from now on with `screen` (set once; a second call is ignored and
    /// returns `false`).
    pub fn set_screen(&self, screen: Arc<dyn AnswerScreen>) -> bool {
        self.inner.screen.set(screen).is_ok()
    }

    /// A random number drawn when this broker was made: question ids restart at `q1` with each
    /// daemon, so references kept outside it (a chat's buttons) carry this too.
    pub fn run_id(&self) -> u64 {
        self.inner.run
    }

    /// Per-sandbox question budgets, by sandbox id.
    pub fn budgets(&self) -> Vec<BudgetStats> {
        let st = self.state();
        let mut v: Vec<BudgetStats> = st
            .budgets
            .iter()
            .map(|(sandbox, b)| BudgetStats {
                sandbox: sandbox.clone(),
                asked: b.asked,
                refused: b.refused,
                asked_in_window: b.asked_in_window,
            })
            .collect();
        v.sort_by(|a, b| a.sandbox.cmp(&b.sandbox));
        v
    }

    /// Ends every open question of `sandbox` (it ended: nobody waits for the answer) with
    /// [`Resolution::Closed`] and [`BrokerEvent::Withdrawn`], and forgets its budget. Returns how
    /// many questions it ended.
    pub fn withdraw_sandbox(&self, sandbox: &str) -> usize {
        let closed: Vec<Open> = {
            let mut st = self.state();
            st.budgets.remove(sandbox);
            let ids: Vec<QuestionId> = st
                .open
                .values()
                .filter(|o| o.claimed.is_none() && o.info.question.sandbox == sandbox)
                .map(|o| o.info.id)
                .collect();
            ids.into_iter()
                .filter_map(|id| st.close(id, "withdrawn: its sandbox ended".into(), None))
                .collect()
        };
        for open in &closed {
            open.tx.send_replace(Some(Resolution::Closed));
            let _ = self.inner.events.send(BrokerEvent::Withdrawn(open.info.clone()));
        }
        closed.len()
    }

    /// The settings.
    pub fn config(&self) -> BrokerConfig {
        self.inner.config
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock is never held across an await or user code that could panic midway.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every question asked, answered or timed out from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<BrokerEvent> {
        self.inner.events.subscribe()
    }

    /// The open questions, oldest first.
    pub fn pending(&self) -> Vec<PendingQuestion> {
        let st = self.state();
        let mut v: Vec<_> =
            st.open.values().filter(|o| o.claimed.is_none()).map(|o| o.info.clone()).collect();
        v.sort_by_key(|q| q.id);
        v
    }

    /// One question by id while it is open (also while an answer to it is being recorded).
    pub fn question(&self, id: QuestionId) -> Option<PendingQuestion> {
        self.state().open.get(&id).map(|o| o.info.clone())
    }

    /// Ends every open question with [`Resolution::Closed`] (a denial), for a daemon that stops.
    /// Questions asked afterwards are handled normally.
    pub fn shutdown(&self) -> usize {
        let closed: Vec<Open> = {
            let mut st = self.state();
            let ids: Vec<QuestionId> = st.open.keys().copied().collect();
            ids.into_iter()
                .filter_map(|id| st.close(id, "closed by shutdown".into(), None))
                .collect()
        };
        for open in &closed {
            open.tx.send_replace(Some(Resolution::Closed));
        }
        closed.len()
    }

    /// Holds the caller until the question for (sandbox, host, port) is answered or times out.
    /// Must run inside a tokio runtime (the deadline is a tokio timer).
    pub async fn ask(&self, question: Question) -> Resolution {
        let key = Key {
            sandbox: question.sandbox.clone(),
            host: question.host.to_ascii_lowercase(),
            port: question.port,
        };
        let (id, mut rx) = {
            let mut st = self.state();
            let existing = st.by_key.get(&key).copied();
            match existing.and_then(|id| st.open.get_mut(&id).map(|o| (id, o))) {
                Some((id, open)) => {
                    open.info.waiters += 1;
                    (id, open.tx.subscribe())
                }
                None => {
                    // Counted and inserted under the one lock: simultaneous requests cannot
                    // pass the limit.
                    let open =
                        st.open.values().filter(|o| o.info.question.sandbox == key.sandbox).count();
                    if open >= self.inner.config.max_open_per_sandbox {
                        return Resolution::TooManyQuestions { open };
                    }
                    if let Some(over) = self.spend_budget(&mut st, &key.sandbox) {
                        return over;
                    }
                    st.next_id += 1;
                    let id = QuestionId(st.next_id);
                    let now = SystemTime::now();
                    let timeout = self.inner.config.timeout;
                    let info = PendingQuestion {
                        id,
                        question: Question { host: key.host.clone(), ..question },
                        first_asked: now,
                        deadline: now + timeout,
                        waiters: 1,
                    };
                    let deadline = Instant::now() + timeout;
                    let (tx, rx) = watch::channel(None);
                    st.by_key.insert(key, id);
                    st.open.insert(id, Open { info: info.clone(), deadline, claimed: None, tx });
                    drop(st);
                    let _ = self.inner.events.send(BrokerEvent::Asked(info));
                    let weak = Arc::downgrade(&self.inner);
                    tokio::spawn(expire_at(weak, id, deadline));
                    (id, rx)
                }
            }
        };
        let _waiting = Waiter { broker: self, id };
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or(Resolution::Closed),
            Err(_) => Resolution::Closed,
        }
    }

    /// Applies an answer: the first answer to a question wins, later ones get
    /// [`AnswerError::AlreadyAnswered`]. Its grants are stored before anything acknowledges it
    /// (see "Stored, then acknowledged" in the module docs).
    pub async fn answer(
        &self,
        target: AnswerTarget,
        answer: Answer,
        by: Responder,
    ) -> Result<Answered, AnswerError> {
        let at = SystemTime::now();
        let claim = self.claim(&target, answer, &by, at)?;
        let (grants, grant_errors) = self.store(claim.requests).await;
        let released = self.acknowledge(&claim.ids, answer, &by, &claim.pattern);
        Ok(Answered { released, grants, grant_errors })
    }

    /// Step 1 of an answer: claims the open questions `target` covers (a second answer to them
    /// now loses) and derives the grants to store.
    fn claim(
        &self,
        target: &AnswerTarget,
        answer: Answer,
        by: &Responder,
        at: SystemTime,
    ) -> Result<Claim, AnswerError> {
        let mut st = self.state();
        let (ids, pattern, ports, sandbox) = match target {
            AnswerTarget::Question(id) => {
                let Some(open) = st.open.get(id) else {
                    return Err(match st.closed.iter().rev().find(|c| c.id == *id) {
                        Some(c) => AnswerError::AlreadyAnswered {
                            id: *id,
                            how: c.how.clone(),
                            by: c.by.clone(),
                        },
                        None => AnswerError::NotFound { id: *id },
                    });
                };
                if let Some(who) = &open.claimed {
                    return Err(AnswerError::AlreadyAnswered {
                        id: *id,
                        how: format!("being answered {who}"),
                        by: Some(who.clone()),
                    });
                }
                let q = &open.info.question;
                (vec![*id], q.host.clone(), Ports::Asked, None)
            }
            AnswerTarget::Host { pattern, sandbox, any_port } => {
                let (pat, typed) = AnswerPattern::parse_with_port(pattern)?;
                let mut ids: Vec<QuestionId> = st
                    .open
                    .values()
                    .filter(|o| o.claimed.is_none())
                    .filter(|o| sandbox.as_ref().is_none_or(|s| s.id == o.info.question.sandbox))
                    .filter(|o| pat.matches(&o.info.question.host))
                    .filter(|o| typed.is_none_or(|p| p == o.info.question.port))
                    .map(|o| o.info.id)
                    .collect();
                ids.sort();
                let ports = match (any_port, typed) {
                    (true, _) => Ports::Any,
                    (false, Some(p)) => Ports::Typed(p),
                    (false, None) => Ports::Asked,
                };
                (ids, pat.as_str().to_string(), ports, sandbox.clone())
            }
        };
        let covered: Vec<PendingQuestion> =
            ids.iter().filter_map(|id| st.open.get(id)).map(|o| o.info.clone()).collect();
        let requests = grant_requests(&covered, sandbox.as_ref(), &pattern, ports, answer, by, at)?;
        if let Some(screen) = self.inner.screen.get() {
            for r in &requests {
                screen.screen(r).map_err(AnswerError::Blocked)?;
            }
        }
        for id in &ids {
            if let Some(o) = st.open.get_mut(id) {
                o.claimed = Some(by.clone());
            }
        }
        Ok(Claim { ids, requests, pattern })
    }

    /// Step 2: stores the grants (off the async threads: the store's calls block) and waits
    /// until the writer has returned for each. Returns the ids stored and the errors.
    async fn store(&self, requests: Vec<GrantRequest>) -> (Vec<String>, Vec<String>) {
        let mut grants = Vec::new();
        let mut grant_errors = Vec::new();
        let Some(writer) = self.inner.writer.clone() else { return (grants, grant_errors) };
        let results = tokio::task::spawn_blocking(move || {
            requests.iter().map(|r| writer.write(r)).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| vec![Err(format!("grant writer failed: {e}"))]);
        for r in results {
            match r {
                Ok(id) => grants.push(id),
                Err(e) => {
                    tracing::warn!(error = %e, "could not record a grant");
                    grant_errors.push(e);
                }
            }
        }
        (grants, grant_errors)
    }

    /// Step 3, only once the answer is stored: releases the claimed questions' waiters and
    /// publishes [`BrokerEvent::Answered`] for each. Returns the questions released.
    fn acknowledge(
        &self,
        claimed: &[QuestionId],
        answer: Answer,
        by: &Responder,
        pattern: &str,
    ) -> Vec<PendingQuestion> {
        let mut released = Vec::new();
        let outcome = Resolution::Answered { answer, by: by.clone(), pattern: pattern.to_owned() };
        {
            let mut st = self.state();
            for &id in claimed {
                if let Some(open) =
                    st.close(id, answer.to_string() + " " + &by.to_string(), Some(by.clone()))
                {
                    open.tx.send_replace(Some(outcome.clone()));
                    released.push(open.info);
                }
            }
        }
        for q in &released {
            let _ = self.inner.events.send(BrokerEvent::Answered {
                question: q.clone(),
                answer,
                by: by.clone(),
                pattern: pattern.to_owned(),
            });
        }
        released
    }

    fn expire(&self, id: QuestionId) {
        let expired = {
            let mut st = self.state();
            match st.open.get(&id) {
                // Claimed: an answer is being recorded and will release it.
                Some(o) if o.claimed.is_none() && o.deadline <= Instant::now() => {
                    st.close(id, "timed out".into(), None)
                }
                Some(_) | None => None,
            }
        };
        if let Some(open) = expired {
            let after = self.inner.config.timeout;
            open.tx.send_replace(Some(Resolution::TimedOut { after }));
            tracing::info!(question = %id, host = %open.info.question.host, "approval timed out");
            let _ = self.inner.events.send(BrokerEvent::TimedOut(open.info));
        }
    }

    /// Counts a new question against its sandbox's budget; `Some(outcome)` when it is over.
    /// The first refusal of a window schedules the window's one summary event.
    fn spend_budget(&self, st: &mut State, sandbox: &str) -> Option<Resolution> {
        let cfg = self.inner.config;
        let now = Instant::now();
        let fresh = || Budget {
            window_start: now,
            asked_in_window: 0,
            refused_in_window: 0,
            asked: 0,
            refused: 0,
        };
        let State { budgets, total, .. } = st;
        let b = budgets.entry(sandbox.to_owned()).or_insert_with(fresh);
        let t = total.get_or_insert_with(fresh);
        for x in [&mut *b, &mut *t] {
            if now.duration_since(x.window_start) >= cfg.budget_window {
                x.window_start = now;
                x.asked_in_window = 0;
                x.refused_in_window = 0;
            }
        }
        let per_sandbox = cfg.questions_per_minute.max(1);
        let all = cfg.questions_per_minute_total.max(1);
        let limit = if b.asked_in_window >= per_sandbox {
            per_sandbox
        } else if t.asked_in_window >= all {
            all
        } else {
            b.asked_in_window += 1;
            b.asked += 1;
            t.asked_in_window += 1;
            t.asked += 1;
            return None;
        };
        b.refused += 1;
        b.refused_in_window += 1;
        if b.refused_in_window == 1 {
            let weak = Arc::downgrade(&self.inner);
            let at = b.window_start + cfg.budget_window;
            tokio::spawn(budget_summary_at(weak, sandbox.to_owned(), at));
        }
        Some(Resolution::OverBudget { limit, window: cfg.budget_window })
    }

    fn budget_summary(&self, sandbox: String) {
        let cfg = self.inner.config;
        let refused = {
            let mut st = self.state();
            match st.budgets.get_mut(&sandbox) {
                // Counted in the window that ended; a new window (started by a later question)
                // counts its own.
                Some(b) if b.refused_in_window > 0 => {
                    let n = b.refused_in_window;
                    if Instant::now().duration_since(b.window_start) >= cfg.budget_window {
                        b.refused_in_window = 0;
                    }
                    n
                }
                _ => return,
            }
        };
        let _ = self.inner.events.send(BrokerEvent::OverBudget {
            sandbox,
            refused,
            limit: cfg.questions_per_minute.max(1),
            window: cfg.budget_window,
        });
    }

    fn leave(&self, id: QuestionId) {
        if let Some(o) = self.state().open.get_mut(&id) {
            o.info.waiters = o.info.waiters.saturating_sub(1);
        }
    }
}

async fn budget_summary_at(broker: Weak<BrokerShared>, sandbox: String, at: Instant) {
    tokio::time::sleep_until(at).await;
    if let Some(inner) = broker.upgrade() {
        Broker { inner }.budget_summary(sandbox);
    }
}

/// A random number for [`Broker::run_id`], from the kernel's generator (the clock and the pid
/// where that cannot be read: still different across restarts).
fn random_u64() -> u64 {
    use std::io::Read as _;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_ok() {
        return u64::from_ne_bytes(b);
    }
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

async fn expire_at(broker: Weak<BrokerShared>, id: QuestionId, deadline: Instant) {
    tokio::time::sleep_until(deadline).await;
    if let Some(inner) = broker.upgrade() {
        Broker { inner }.expire(id);
    }
}

/// Counts a waiter out when its request finishes or is dropped.
struct Waiter<'a> {
    broker: &'a Broker,
    id: QuestionId,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.broker.leave(self.id);
    }
}

/// Which port an answer's grants open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    /// Each released question's port (nothing released: [`DEFAULT_PORT`]).
    Asked,
    /// The port the person typed (`host:port`).
    Typed(u16),
    /// Every port (`--any-port`).
    Any,
}

/// The port of a grant given with nothing pending and no port typed: HTTPS.
pub const DEFAULT_PORT: u16 = 443;

impl Ports {
    fn of(self, q: Option<&PendingQuestion>) -> Option<u16> {
        match (self, q) {
            (Ports::Any, _) => None,
            (Ports::Typed(p), _) => Some(p),
            (Ports::Asked, Some(q)) => Some(q.question.port),
            (Ports::Asked, None) => Some(DEFAULT_PORT),
        }
    }
}

/// Derives the grants to persist from an answer (see the table on [`GrantRequest`]).
fn grant_requests(
    covered: &[PendingQuestion],
    sandbox: Option<&SandboxRef>,
    pattern: &str,
    ports: Ports,
    answer: Answer,
    by: &Responder,
    at: SystemTime,
) -> Result<Vec<GrantRequest>, AnswerError> {
    let scope = answer.scope();
    let effect = if answer.allows() { Effect::Allow } else { Effect::Deny };
    let per_sandbox = || -> Vec<(GrantTarget, Option<u16>)> {
        covered
            .iter()
            .map(|q| (GrantTarget::Sandbox(q.question.sandbox.clone()), ports.of(Some(q))))
            .collect()
    };
    let per_project = || -> Vec<(GrantTarget, Option<u16>)> {
        covered
            .iter()
            .map(|q| {
                let t = match &q.question.project {
                    Some(p) => GrantTarget::Project(p.clone()),
                    None => GrantTarget::Sandbox(q.question.sandbox.clone()),
                };
                (t, ports.of(Some(q)))
            })
            .collect()
    };
    let alone = |t: GrantTarget| vec![(t, ports.of(None))];
    let named_project = sandbox.and_then(|s| s.project.clone()).map(GrantTarget::Project);
    let mut targets = match scope {
        Scope::Once if covered.is_empty() => {
            return Err(AnswerError::NothingPending { pattern: pattern.into() });
        }
        Scope::Once => per_sandbox(),
        Scope::Session if covered.is_empty() => match sandbox {
            Some(s) => alone(GrantTarget::Sandbox(s.id.clone())),
            None => return Err(AnswerError::NeedsSandbox { pattern: pattern.into() }),
        },
        Scope::Session => per_sandbox(),
        // A named sandbox whose project is unknown gets a grant of its own, never a global one.
        Scope::For(_) if covered.is_empty() => alone(match (named_project, sandbox) {
            (Some(p), _) => p,
            (None, Some(s)) => GrantTarget::Sandbox(s.id.clone()),
            (None, None) => GrantTarget::Global,
        }),
        Scope::For(_) => per_project(),
        Scope::Always { global: true } if covered.is_empty() => alone(GrantTarget::Global),
        Scope::Always { global: true } => {
            covered.iter().map(|q| (GrantTarget::Global, ports.of(Some(q)))).collect()
        }
        Scope::Always { global: false } if covered.is_empty() => match named_project {
            Some(t) => alone(t),
            None => return Err(AnswerError::NeedsProject { pattern: pattern.into() }),
        },
        Scope::Always { global: false } => per_project(),
    };
    let mut seen = std::collections::HashSet::new();
    targets.retain(|t| seen.insert(t.clone()));
    let expires = match scope {
        Scope::For(d) => Some(at + d),
        Scope::Once => Some(at + ONCE_WINDOW),
        Scope::Session | Scope::Always { .. } => None,
    };
    Ok(targets
        .into_iter()
        .map(|(target, port)| GrantRequest {
            pattern: pattern.to_string(),
            port,
            effect,
            scope,
            target,
            expires,
            by: by.clone(),
            at,
        })
        .collect())
}
