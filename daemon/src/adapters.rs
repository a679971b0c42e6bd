//! The daemon's implementations of the proxy's and the approvals' traits, over the store and the
//! broker: grants (a cache of the store's live grants, reloaded on every change), the approver
//! (deny grants first, then a person through the broker), the event sink, the grant writer and
//! the Telegram bot's control.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use sandgate_approvals as approvals;
use sandgate_config::{DomainPattern, Host, PatternSet, PatternUse, Rule, RuleSource, Target};
use sandgate_proxy::{Approver, BoxFuture, DenyReason, EventSink, GrantSource, ProxyEvent, Ruling};
use sandgate_store::{
    Effect, EventKind, EventSender, Grant, GrantList, GrantScope, GrantTarget, NewEvent, NewGrant,
    Store, StoreError, Timestamp,
};
use tokio::sync::broadcast;

use crate::event_cap::{CapVerdict, CappedRefusal, Passed, Report, Summary, Traffic};
use crate::protocol::Event;

/// A sandbox the daemon serves.
#[derive(Debug, Clone)]
pub struct Live {
    /// What the launcher said.
    pub info: crate::protocol::SandboxInfo,
    /// Its project key (for project grants).
    pub project: Option<String>,
    /// Which control connection registered it (the latest one).
    pub conn: u64,
    /// Set before `stop`: the NFLOG reader waits for the kernel's last batch.
    pub flush: Arc<std::sync::atomic::AtomicBool>,
    /// Set to stop serving its listener and NFLOG socket.
    pub stop: Arc<tokio::sync::watch::Sender<bool>>,
    /// Answers, once the NFLOG reader stopped, with what it drained at the end.
    pub nflog_done: Arc<Mutex<Option<tokio::sync::oneshot::Receiver<Vec<serde_json::Value>>>>>,
    /// The launcher's event forwarder, until the sandbox ends.
    pub forwarder: Arc<Mutex<Option<Forwarder>>>,
}

/// The task passing a sandbox's events to its launcher (`server::forward_until`).
#[derive(Debug)]
pub struct Forwarder {
    /// Answers once the forwarder, stopped, has passed on every event published before the stop.
    pub done: tokio::sync::oneshot::Receiver<()>,
    /// Its task.
    pub task: tokio::task::AbortHandle,
}

/// The sandboxes being served, by id.
pub type Registry = Arc<Mutex<HashMap<String, Live>>>;

struct Cached {
    grant: Grant,
    pattern: DomainPattern,
    rule: Arc<Rule>,
}

/// The live grants, in memory (the daemon is the store's only writer of grants, so reloading
/// after each of its writes keeps the cache exact), compiled into [`PatternSet`]s for lookup.
///
/// A [`PatternSet`] answers with the first rule of the best-matching key, so each set may only
/// hold grants that would all be accepted: one set per effect and target (a sandbox, a
/// project, everyone), each grant's own port folded into its pattern, and only grants live when
/// the sets were built. The sets are rebuilt when the grants change (reload) and when the
/// earliest expiry among them passes, so an expired grant stops matching without a reload.
pub struct GrantCache {
    store: Store,
    compiled: RwLock<Arc<Compiled>>,
}

/// The grants and the sets built from them.
#[derive(Default)]
struct Compiled {
    entries: Arc<Vec<Cached>>,
    /// `[allow, deny]` sets of grants for everyone.
    global: [PatternSet; 2],
    /// `[allow, deny]` sets by sandbox id.
    sandbox: HashMap<String, [PatternSet; 2]>,
    /// `[allow, deny]` sets by project key.
    project: HashMap<String, [PatternSet; 2]>,
    /// The rule to cite for each rule in the sets (by its address): the grant's own, whose
    /// pattern is shown as given, without the port folded in.
    cited: HashMap<usize, Arc<Rule>>,
    /// When the first grant in the sets expires: the sets must be built again then.
    rebuild_at: Option<Timestamp>,
}

/// The position of `effect` in a `[allow, deny]` pair.
fn slot(effect: Effect) -> usize {
    match effect {
        Effect::Allow => 0,
        Effect::Deny => 1,
    }
}

impl Compiled {
    /// Compiles the grants of `entries` that are live at `now`.
    fn build(entries: Arc<Vec<Cached>>, now: Timestamp) -> Compiled {
        let mut c = Compiled { entries: Arc::clone(&entries), ..Compiled::default() };
        for e in entries.iter().filter(|e| e.grant.is_live(now)) {
            // The grant's port (the port a question asked) narrows its pattern's.
            let port = match (e.pattern.port, e.grant.grant.port) {
                (Some(a), Some(b)) if a != b => continue, // matches nothing
                (a, b) => a.or(b),
            };
            let indexed = Rule {
                pattern: Some(DomainPattern { host: e.pattern.host.clone(), port }),
                source: e.rule.source.clone(),
            };
            let sets = match &e.grant.grant.target {
                GrantTarget::Global => &mut c.global,
                GrantTarget::Sandbox(s) => c.sandbox.entry(s.clone()).or_default(),
                GrantTarget::Project(p) => c.project.entry(p.clone()).or_default(),
            };
            let set = &mut sets[slot(e.grant.grant.effect)];
            set.insert(indexed);
            if let Some(added) = set.rules().last() {
                c.cited.insert(Arc::as_ptr(added) as usize, e.rule.clone());
            }
            if let GrantScope::Until(t) = e.grant.grant.scope {
                c.rebuild_at = Some(c.rebuild_at.map_or(t, |r| r.min(t)));
            }
        }
        c
    }
}

impl GrantCache {
    /// An empty cache; call [`reload`](Self::reload).
    pub fn new(store: Store) -> GrantCache {
        GrantCache { store, compiled: RwLock::new(Arc::new(Compiled::default())) }
    }

    /// Reads the live grants from the store. A grant whose pattern no longer parses is skipped
    /// (and logged): it cannot match anything safely.
    pub fn reload(&self) -> Result<usize, StoreError> {
        let grants = self.store.list_grants(GrantList::Live(Timestamp::now()))?;
        let mut out = Vec::with_capacity(grants.len());
        for grant in grants {
            if grant.grant.scope == GrantScope::Once {
                continue; // consumed by the requests that were waiting when it was given
            }
            let usage = match grant.grant.effect {
                Effect::Allow => PatternUse::Allow,
                Effect::Deny => PatternUse::Deny,
            };
            match DomainPattern::parse(&grant.grant.pattern, usage) {
                Ok(pattern) => {
                    let rule = Arc::new(Rule {
                        pattern: Some(pattern.clone()),
                        source: RuleSource::Grant(describe(&grant)),
                    });
                    out.push(Cached { grant, pattern, rule });
                }
                Err(e) => tracing::warn!(id = grant.id.0, error = %e, "unusable grant skipped"),
            }
        }
        let n = out.len();
        let compiled = Compiled::build(Arc::new(out), Timestamp::now());
        *self.compiled.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(compiled);
        Ok(n)
    }

    /// The sets as of `now`: built again first when a grant in them has expired since.
    fn current(&self, now: Timestamp) -> Arc<Compiled> {
        let compiled = self.compiled.read().unwrap_or_else(|e| e.into_inner()).clone();
        if compiled.rebuild_at.is_none_or(|t| now < t) {
            return compiled;
        }
        let fresh = Arc::new(Compiled::build(Arc::clone(&compiled.entries), now));
        let mut slot = self.compiled.write().unwrap_or_else(|e| e.into_inner());
        // Unless a reload replaced them meanwhile (then those are newer).
        if Arc::ptr_eq(&slot, &compiled) {
            *slot = fresh.clone();
        }
        fresh
    }

    /// The live allow grants for this sandbox / project, as a 403 lists them (`host:port`, or
    /// the pattern alone for every port), oldest first.
    pub fn listed(&self, sandbox: &str, project: Option<&str>) -> Vec<String> {
        let now = Timestamp::now();
        let compiled = self.current(now);
        compiled
            .entries
            .iter()
            .filter(|e| e.grant.is_live(now) && e.grant.grant.effect == Effect::Allow)
            .filter(|e| match &e.grant.grant.target {
                GrantTarget::Global => true,
                GrantTarget::Sandbox(s) => s == sandbox,
                GrantTarget::Project(p) => project == Some(p.as_str()),
            })
            .map(|e| match (e.pattern.port, e.grant.grant.port) {
                (None, Some(port)) => format!("{}:{port}", e.grant.grant.pattern),
                _ => e.grant.grant.pattern.clone(),
            })
            .collect()
    }

    /// A live grant of `effect` covering `host:port` for this sandbox / project (the most
    /// specific pattern first, as in a policy: exact name, longest `*.` suffix, ...).
    pub fn find(
        &self,
        effect: Effect,
        sandbox: &str,
        project: Option<&str>,
        host: &Host,
        port: u16,
    ) -> Option<Arc<Rule>> {
        let compiled = self.current(Timestamp::now());
        let i = slot(effect);
        let sets = [
            compiled.sandbox.get(sandbox).map(|s| &s[i]),
            project.and_then(|p| compiled.project.get(p)).map(|s| &s[i]),
            Some(&compiled.global[i]),
        ];
        let hit = sets.into_iter().flatten().find_map(|set| set.find(host, port))?;
        compiled.cited.get(&(Arc::as_ptr(hit) as usize)).cloned()
    }
}

/// `grant #12 (always, project) by alice via cli`.
fn describe(g: &Grant) -> String {
    let scope = match g.grant.scope {
        GrantScope::Once => "once".to_owned(),
        GrantScope::Session => "session".to_owned(),
        GrantScope::Until(t) => format!("until {t}"),
        GrantScope::Always => "always".to_owned(),
    };
    let target = match &g.grant.target {
        GrantTarget::Sandbox(s) => format!("sandbox {s}"),
        GrantTarget::Project(p) => project_text(p),
        GrantTarget::Global => "global".to_owned(),
    };
    format!("#{} ({scope}, {target}) by {} via {}", g.id, g.grant.approved_by, g.grant.channel)
}

/// A change to a sandbox's row.
enum RecordOp {
    Register(Box<sandgate_store::NewSandbox>),
    Finish(String, Option<i32>, Timestamp),
    Lost(String, Timestamp),
    Flush(std::sync::mpsc::Sender<()>),
}

/// Attempts at a sandbox row whose write found the store busy (each waits the store's busy
/// timeout): a lost registration would make every session grant for that sandbox fail.
const RECORD_ATTEMPTS: u32 = 3;

/// How long a grant for a sandbox waits for the sandbox's row (see [`Writer`]).
const RECORD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Sandbox rows are history, not policy: they are written in order by one thread, off the
/// launch path, so a launch does not wait for the store's `fsync`. Readers (`ls`, `status`,
/// `rules`) and writers of what refers to a row (a grant for one sandbox, see [`Writer`]) flush
/// first. Cheap to clone; clones share the thread.
#[derive(Clone)]
pub struct Records {
    tx: std::sync::mpsc::Sender<RecordOp>,
    /// Operations sent and not yet done.
    backlog: Arc<std::sync::atomic::AtomicUsize>,
}

impl Records {
    /// Starts the writer thread.
    pub fn start(store: Store) -> Records {
        Records::start_after(store, None)
    }

    /// [`Records::start`], the thread writing nothing until `hold` says so (or is dropped).
    fn start_after(store: Store, hold: Option<std::sync::mpsc::Receiver<()>>) -> Records {
        use std::sync::atomic::Ordering;
        let (tx, rx) = std::sync::mpsc::channel::<RecordOp>();
        let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let left = backlog.clone();
        std::thread::Builder::new()
            .name("sandgate-records".into())
            .spawn(move || {
                if let Some(hold) = hold {
                    let _ = hold.recv();
                }
                for op in rx {
                    let mut attempt = 1;
                    let r = loop {
                        match apply(&store, &op) {
                            Err(StoreError::Busy { .. }) if attempt < RECORD_ATTEMPTS => {
                                attempt += 1;
                            }
                            r => break r,
                        }
                    };
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "sandbox record not written");
                    }
                    left.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .map_or_else(
                |e| {
                    tracing::error!(error = %e, "no sandbox record thread");
                    Records { tx: std::sync::mpsc::channel().0, backlog: Arc::default() }
                },
                |_| Records { tx, backlog },
            )
    }

    fn send(&self, op: RecordOp) -> bool {
        use std::sync::atomic::Ordering;
        self.backlog.fetch_add(1, Ordering::AcqRel);
        let sent = self.tx.send(op).is_ok();
        if !sent {
            self.backlog.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// Records a sandbox as running (again).
    pub fn register(&self, s: sandgate_store::NewSandbox) {
        self.send(RecordOp::Register(Box::new(s)));
    }

    /// Records its end.
    pub fn finish(&self, id: String, exit_status: Option<i32>) {
        self.send(RecordOp::Finish(id, exit_status, Timestamp::now()));
    }

    /// Records that its launcher went away.
    pub fn lost(&self, id: String) {
        self.send(RecordOp::Lost(id, Timestamp::now()));
    }

    /// Waits (up to 2 s) until everything sent so far is written.
    pub async fn flush(&self) {
        let records = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            records.flush_blocking(std::time::Duration::from_secs(2))
        })
        .await;
    }

    /// Waits (up to `patience`, on this thread) until everything sent so far is written;
    /// whether it was.
    pub fn flush_blocking(&self, patience: std::time::Duration) -> bool {
        let (done, rx) = std::sync::mpsc::channel();
        self.send(RecordOp::Flush(done)) && rx.recv_timeout(patience).is_ok()
    }

    /// Operations sent and not yet done (tests watch the thread's progress with it).
    #[cfg(test)]
    fn backlog(&self) -> usize {
        self.backlog.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Writes one sandbox row change.
fn apply(store: &Store, op: &RecordOp) -> Result<(), StoreError> {
    match op {
        RecordOp::Register(s) => store.register_sandbox(s).map(drop),
        RecordOp::Finish(id, status, at) => store.finish_sandbox(id, *status, *at),
        RecordOp::Lost(id, at) => store.mark_lost(id, *at).map(drop),
        RecordOp::Flush(done) => {
            let _ = done.send(());
            Ok(())
        }
    }
}

/// What the adapters share.
pub struct Shared {
    /// Sandbox rows, written in the background.
    pub records: Records,
    /// The store.
    pub store: Store,
    /// Events to the store (never blocks).
    pub events: EventSender,
    /// The writer behind `events` (taken at shutdown).
    pub writer: Mutex<Option<sandgate_store::EventWriter>>,
    /// The Telegram bot, when configured (for blocked-traffic alerts).
    pub telegram: std::sync::OnceLock<approvals::telegram::TelegramHandle>,
    /// Questions.
    pub broker: approvals::Broker,
    /// Grants.
    pub grants: Arc<GrantCache>,
    /// Sandboxes served.
    pub sandboxes: Registry,
    /// Events for launchers and `watch`.
    pub bus: broadcast::Sender<Event>,
    /// The per-sandbox cap on stored traffic events.
    pub cap: crate::event_cap::EventCap,
    /// `[daemon] ask = "deny"`: nobody is asked about any sandbox's destinations (`--no-ask`
    /// does the same for one sandbox).
    pub unattended: bool,
    /// This, for the timers that store what the cap counted when its period ends (build with
    /// `Arc::new_cyclic`).
    pub me: std::sync::Weak<Shared>,
    /// The host's guest-user fences as last checked (macOS, as root).
    pub fences: crate::fences::Fences,
    /// Why a blocked-traffic source stopped (macOS: `log stream` needs an admin account), for
    /// `status`.
    pub monitor_error: Mutex<Option<String>>,
    /// The OpenTelemetry export, when `[telemetry] otlp_endpoint` is set.
    pub telemetry: Option<Arc<crate::telemetry::Export>>,
}

impl Shared {
    /// The event writer's counters.
    pub fn events_stats(&self) -> sandgate_store::EventWriterStats {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|w| w.stats())
            .unwrap_or_default()
    }

    fn project_of(&self, sandbox: &str) -> Option<String> {
        self.sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sandbox)
            .and_then(|l| l.project.clone())
    }

    fn live(&self, sandbox: &str) -> Option<Live> {
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).get(sandbox).cloned()
    }

    /// Records an event in the store (queued) and tells the subscribers. A sandbox's traffic
    /// events past its cap ([`event_cap`](crate::event_cap)) are told, and stored as the cap
    /// says: refusals only counted, what was let through counted into summaries.
    pub fn publish(&self, kind: EventKind, sandbox: Option<&str>, event: Event) {
        if let Some(t) = &self.telemetry {
            t.count(&event);
        }
        let store = match (kind, sandbox, traffic_of(&event)) {
            (EventKind::Decision | EventKind::BlockedPacket, Some(id), Some(traffic)) => {
                let a = self.cap.admit(id, std::time::Instant::now(), traffic);
                self.record_reports(a.due);
                if let Some(at) = a.wake_at {
                    self.wake_cap_at(at);
                }
                match a.verdict {
                    CapVerdict::Store => true,
                    CapVerdict::Count => false,
                    CapVerdict::Drop { first } => {
                        if first {
                            tracing::warn!(
                                sandbox = id,
                                per_minute = self.cap.per_minute(),
                                "the sandbox's traffic events come faster than the cap: its \
                                 refusals are not stored (counted, and reported a minute later \
                                 and at its end), what it gets through is counted per \
                                 destination"
                            );
                        }
                        false
                    }
                }
            }
            _ => true,
        };
        if store {
            self.store_event(kind, sandbox, &event);
        }
        let _ = self.bus.send(event);
    }

    /// The sandbox ended: what the cap held back for it (refusals not stored, requests
    /// counted) is stored now, before its end is.
    pub fn end_cap(&self, sandbox: &str) {
        self.record_reports(self.cap.end(sandbox));
    }

    /// The daemon stops: what the cap held back for every sandbox is stored now (before the
    /// event writer's last batch).
    pub fn end_all_caps(&self) {
        self.record_reports(self.cap.end_all());
    }

    /// Has [`EventCap::due`](crate::event_cap::EventCap::due) run at `at` (a period began
    /// counting): its reports are stored then, not only when the sandbox's next event or its
    /// end comes. Outside a runtime (not the daemon) they wait for those.
    fn wake_cap_at(&self, at: std::time::Instant) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let me = self.me.clone();
        rt.spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            if let Some(s) = me.upgrade() {
                s.record_reports(s.cap.due(std::time::Instant::now()));
            }
        });
    }

    /// Stores what the cap held back. Refusals not stored are said to subscribers too (the
    /// launcher says so on the command's stderr); summaries of what was let through are not,
    /// since each request was told when it happened.
    fn record_reports(&self, reports: Vec<Report>) {
        for r in reports {
            match r {
                Report::Dropped { sandbox, refusal, dropped } => {
                    let kind = match refusal {
                        CappedRefusal::Proxy => EventKind::Decision,
                        CappedRefusal::Firewall => EventKind::BlockedPacket,
                    };
                    let event = Event::EventsCapped {
                        sandbox,
                        decision: refusal.as_str().to_owned(),
                        not_stored: dropped.events,
                        standing_for: dropped.standing_for,
                        per_minute: self.cap.per_minute(),
                        burst: self.cap.burst(),
                    };
                    self.store_event(kind, event.sandbox(), &event);
                    let _ = self.bus.send(event);
                }
                Report::Counted { sandbox, summary } => {
                    let event = summary_event(sandbox, summary, self.cap.period());
                    self.store_event(EventKind::Decision, event.sandbox(), &event);
                }
            }
        }
    }

    fn store_event(&self, kind: EventKind, sandbox: Option<&str>, event: &Event) {
        // What is stored is what is exported: `sandgate log` and the collector agree.
        if let Some(t) = &self.telemetry {
            t.log(event);
        }
        if let Ok(details) = serde_json::to_value(event) {
            self.events.send(NewEvent {
                time: Timestamp::now(),
                sandbox: sandbox.map(str::to_owned),
                kind,
                details,
            });
        }
    }
}

/// What a traffic event is to the cap (`None`: not traffic, never capped).
fn traffic_of(event: &Event) -> Option<Traffic<'_>> {
    match event {
        Event::Request {
            method,
            host,
            port,
            path,
            decision,
            rule,
            bytes_up,
            bytes_down,
            ms,
            count,
            ..
        } if decision == "allow" => Some(Traffic::Pass(Passed {
            method,
            host,
            port: *port,
            path: path.as_deref(),
            rule,
            bytes_up: *bytes_up,
            bytes_down: *bytes_down,
            ms: *ms,
            requests: *count,
        })),
        Event::Request { count, .. } => Some(Traffic::Refuse(CappedRefusal::Proxy, *count)),
        Event::Blocked { count, .. } => Some(Traffic::Refuse(CappedRefusal::Firewall, *count)),
        _ => None,
    }
}

/// The stored event of a summary of what a sandbox got through past its cap: a request line
/// with the count, the bytes, and a rule that says what it stands for.
fn summary_event(sandbox: String, s: Summary, period: std::time::Duration) -> Event {
    let to = match (s.host.as_str(), s.port) {
        (crate::event_cap::OTHER_HOSTS, _) => "other hosts".to_owned(),
        (h, 0) => h.to_owned(),
        (h, p) if h.contains(':') => format!("[{h}]:{p}"),
        (h, p) => format!("{h}:{p}"),
    };
    let rule = format!(
        "{} more to {to} within {} s (past the sandbox's cap on stored events), e.g. {}: {}",
        s.requests,
        period.as_secs(),
        s.samples.join(", "),
        s.rule
    );
    Event::Request {
        sandbox,
        method: s.method,
        host: s.host,
        port: s.port,
        path: None,
        decision: "allow".to_owned(),
        rule,
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        ms: s.ms,
        error: None,
        count: s.requests,
        samples: s.samples,
        process: None,
    }
}

/// [`GrantSource`] over the cache: allow grants, unless a deny grant covers the target too.
pub struct Grants(pub Arc<Shared>);

impl GrantSource for Grants {
    fn grant_for<'a>(
        &'a self,
        sandbox: &'a sandgate_proxy::SandboxId,
        target: &'a Target,
    ) -> BoxFuture<'a, Option<Arc<Rule>>> {
        Box::pin(async move {
            let s = &self.0;
            let project = s.project_of(sandbox.as_str());
            let find = |e| {
                s.grants.find(e, sandbox.as_str(), project.as_deref(), &target.host, target.port)
            };
            if find(Effect::Deny).is_some() {
                return None; // the approver answers with the deny grant
            }
            find(Effect::Allow)
        })
    }

    fn listed(&self, sandbox: &sandgate_proxy::SandboxId) -> Vec<String> {
        let project = self.0.project_of(sandbox.as_str());
        self.0.grants.listed(sandbox.as_str(), project.as_deref())
    }
}

/// [`Approver`]: a deny grant answers at once; otherwise the broker asks a person.
pub struct Asker(pub Arc<Shared>);

impl Approver for Asker {
    fn ask(&self, q: sandgate_proxy::ApprovalRequest) -> BoxFuture<'_, Ruling> {
        Box::pin(async move {
            let s = &self.0;
            let live = s.live(q.sandbox.as_str());
            let project = live.as_ref().and_then(|l| l.project.clone());
            let host = &q.target.host;
            if let Some(rule) = s.grants.find(
                Effect::Deny,
                q.sandbox.as_str(),
                project.as_deref(),
                host,
                q.target.port,
            ) {
                return Ruling::Deny(DenyReason::Rule(rule));
            }
            if let Some(rule) = s.grants.find(
                Effect::Allow,
                q.sandbox.as_str(),
                project.as_deref(),
                host,
                q.target.port,
            ) {
                return Ruling::Allow(rule); // granted while this request was on its way
            }
            // Nobody to ask: refused at once; the proxy records the refusal, which `log
            // --summary` lists as what would have been asked.
            if s.unattended || live.as_ref().is_some_and(|l| l.info.no_ask) {
                return Ruling::Deny(DenyReason::Unattended);
            }
            let host_text = match host {
                Host::Name(n) => n.as_str().to_owned(),
                Host::Ip(ip) => ip.to_string(),
            };
            let question = approvals::Question {
                sandbox: q.sandbox.to_string(),
                host: host_text,
                port: q.target.port,
                method: Some(q.method.clone()).filter(|m| !m.is_empty()),
                path: q.path.clone(),
                command: live.as_ref().map(|l| l.info.command.clone()).unwrap_or_default(),
                cwd: live.as_ref().map(|l| l.info.cwd.clone()),
                project,
                process: q.process.clone(),
            };
            outcome_to_answer(s.broker.ask(question).await)
        })
    }
}

fn outcome_to_answer(outcome: approvals::Resolution) -> Ruling {
    match outcome {
        approvals::Resolution::Answered { answer, by, pattern } => {
            let usage = if answer.allows() { PatternUse::Allow } else { PatternUse::Deny };
            let rule = Arc::new(Rule {
                pattern: DomainPattern::parse(&pattern, usage).ok(),
                source: RuleSource::Grant(format!("{answer} {by}")),
            });
            if answer.allows() { Ruling::Allow(rule) } else { Ruling::Deny(DenyReason::Rule(rule)) }
        }
        approvals::Resolution::TimedOut { .. } => Ruling::Deny(DenyReason::TimedOut),
        approvals::Resolution::Closed => Ruling::Deny(DenyReason::Denied),
        approvals::Resolution::TooManyQuestions { open } => {
            Ruling::Deny(DenyReason::TooManyQuestions(open))
        }
        approvals::Resolution::OverBudget { limit, window } => {
            Ruling::Deny(DenyReason::OverBudget { limit, window })
        }
    }
}

/// [`EventSink`]: each proxy event to the store (queued, never blocking) and to subscribers.
pub struct Sink(pub Arc<Shared>);

impl EventSink for Sink {
    fn record(&self, e: ProxyEvent) {
        if let Some(t) = &self.0.telemetry
            && e.secrets_injected > 0
        {
            t.telemetry.counters().secrets_injected(u64::from(e.secrets_injected));
        }
        let sandbox = e.sandbox.to_string();
        let event = Event::Request {
            sandbox: sandbox.clone(),
            method: e.method,
            host: e.host,
            port: e.port,
            path: e.path,
            decision: e.decision.as_str().to_owned(),
            rule: e.rule,
            bytes_up: e.bytes_up,
            bytes_down: e.bytes_down,
            ms: e.duration.as_secs_f64() * 1e3,
            error: e.error,
            count: e.count,
            samples: e.samples,
            process: e.process,
        };
        self.0.publish(EventKind::Decision, Some(&sandbox), event);
    }
}

/// [`approvals::GrantWriter`]: answers become grants in the store; the cache is reloaded.
///
/// A grant for one sandbox refers to the sandbox's row, which [`Records`] writes in the
/// background: the writer waits for the rows sent before it (issue 32: a `/deny` answered a
/// moment after the launch was acknowledged in the chat while its grant failed for want of the
/// row, and was lost).
pub struct Writer {
    /// The store.
    pub store: Store,
    /// The cache to reload.
    pub grants: Arc<GrantCache>,
    /// The sandbox rows a grant may refer to.
    pub records: Records,
}

impl approvals::GrantWriter for Writer {
    fn write(&self, g: &approvals::GrantRequest) -> Result<String, String> {
        let s = self;
        if let GrantTarget::Sandbox(id) = &g.target
            && !s.records.flush_blocking(RECORD_PATIENCE)
        {
            tracing::warn!(sandbox = %id, "sandbox records not written in time");
        }
        let created = Timestamp::from_system_time(g.at);
        let scope = match g.scope {
            // "Once" covers the waiting requests and the same sandbox's next ones to the same
            // host and port for a few seconds (a client's second connection): a short grant.
            approvals::Scope::Once => GrantScope::Until(Timestamp::from_system_time(
                g.expires.unwrap_or_else(|| g.at + approvals::ONCE_WINDOW),
            )),
            approvals::Scope::Session => GrantScope::Session,
            approvals::Scope::For(d) => GrantScope::Until(Timestamp::from_system_time(
                g.expires.unwrap_or_else(|| g.at + d),
            )),
            approvals::Scope::Always { .. } => GrantScope::Always,
        };
        let new = NewGrant {
            pattern: g.pattern.clone(),
            port: g.port,
            effect: g.effect,
            scope,
            target: g.target.clone(),
            approved_by: g.by.who.clone(),
            channel: g.by.channel.as_str().to_owned(),
            created,
        };
        let grant = s.store.add_grant(&new).map_err(|e| e.to_string())?;
        if let Err(e) = s.grants.reload() {
            tracing::warn!(error = %e, "grant cache not reloaded");
        }
        Ok(grant.id.wire())
    }
}

/// Lines for `sandgate rules` and the bot's `/rules`.
pub fn format_grant(g: &Grant) -> String {
    // An explicit "any port": a grant without one opens every port of the host.
    let port = g.grant.port.map_or_else(|| " (any port)".to_owned(), |p| format!(":{p}"));
    let effect = g.grant.effect.as_str();
    let scope = match g.grant.scope {
        GrantScope::Once => "once".to_owned(),
        GrantScope::Session => "session".to_owned(),
        GrantScope::Until(t) => {
            let left = t.0 - Timestamp::now().0;
            if left > 0 {
                format!(
                    "{} left",
                    approvals::format_duration(std::time::Duration::from_millis(left as u64))
                )
            } else {
                "expired".to_owned()
            }
        }
        GrantScope::Always => "always".to_owned(),
    };
    let target = match &g.grant.target {
        GrantTarget::Sandbox(s) => format!("sandbox {s}"),
        GrantTarget::Project(p) => project_text(p),
        GrantTarget::Global => "global".to_owned(),
    };
    let state = if g.revoked.is_some() {
        " [revoked]"
    } else if g.used.is_some() {
        " [used]"
    } else {
        ""
    };
    format!(
        "#{:<4} {effect:<5} {}{port}  {scope}, {target}, by {} via {}{state}",
        g.id, g.grant.pattern, g.grant.approved_by, g.grant.channel
    )
}

/// `project /home/u/code/demo`; a project key of an older sandgate (a hash of the working
/// directory) is shown as such.
fn project_text(p: &str) -> String {
    if p.starts_with('/') {
        format!("project {}", approvals::terminal::sanitize(p))
    } else {
        let short: String = p.chars().take(8).collect();
        format!("project #{} (an older sandgate's key)", approvals::terminal::sanitize(&short))
    }
}

/// The daemon's answers to the Telegram bot's `/rules`, `/revoke`, `/status` (its
/// [`BotControl`](approvals::telegram::BotControl)).
pub struct DaemonBot(pub Arc<Shared>, pub SystemTime);

impl approvals::telegram::BotControl for DaemonBot {
    fn rules(&self) -> String {
        // "Current" depends on which sandboxes still run: their rows first.
        self.0.records.flush_blocking(std::time::Duration::from_secs(2));
        match self.0.store.list_grants(GrantList::Current(Timestamp::now())) {
            Ok(g) if g.is_empty() => "No grants.".to_owned(),
            Ok(g) => g.iter().map(format_grant).collect::<Vec<_>>().join("\n"),
            Err(e) => format!("cannot read the grants: {e}"),
        }
    }

    fn revoke(&self, id: &str) -> Result<String, String> {
        let n: sandgate_store::GrantId = id.parse().map_err(|e| format!("{e}"))?;
        revoke(&self.0, n).map(|g| format!("revoked {}", format_grant(&g)))
    }

    fn status(&self) -> String {
        let alive = self.0.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).len();
        let pending = self.0.broker.pending().len();
        let up = self.1.elapsed().unwrap_or_default();
        format!(
            "sandgate daemon up {}: {alive} sandbox(es) running, {pending} question(s) pending",
            approvals::format_duration(std::time::Duration::from_secs(up.as_secs().max(1)))
        )
    }
}

/// Revokes grant `id` and reloads the cache.
pub fn revoke(s: &Shared, id: sandgate_store::GrantId) -> Result<Grant, String> {
    let g = s.store.revoke_grant(id, Timestamp::now()).map_err(|e| e.to_string())?;
    if let Err(e) = s.grants.reload() {
        tracing::warn!(error = %e, "grant cache not reloaded");
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(
        pattern: &str,
        port: Option<u16>,
        effect: Effect,
        scope: GrantScope,
        target: GrantTarget,
    ) -> NewGrant {
        NewGrant {
            pattern: pattern.into(),
            port,
            effect,
            scope,
            target,
            approved_by: "alice".into(),
            channel: "cli".into(),
            created: Timestamp::now(),
        }
    }

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    #[test]
    fn grants_match_by_target_port_scope_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let reg = |id: &str| {
            store
                .register_sandbox(&sandgate_store::NewSandbox {
                    id: id.into(),
                    tier: "net".into(),
                    command: vec!["x".into()],
                    cwd: "/p".into(),
                    project: Some("p1".into()),
                    uid: 0,
                    pid: 1,
                    started: Timestamp::now(),
                })
                .unwrap()
        };
        reg("sb1");
        reg("sb2");
        let add = |g: NewGrant| store.add_grant(&g).unwrap();
        add(grant(
            "a.example.com",
            None,
            Effect::Allow,
            GrantScope::Session,
            GrantTarget::Sandbox("sb1".into()),
        ));
        add(grant(
            "*.proj.example",
            Some(443),
            Effect::Allow,
            GrantScope::Always,
            GrantTarget::Project("p1".into()),
        ));
        add(grant("g.example.com", None, Effect::Allow, GrantScope::Always, GrantTarget::Global));
        add(grant(
            "bad.g.example.com",
            None,
            Effect::Deny,
            GrantScope::Always,
            GrantTarget::Global,
        ));
        let once = add(grant(
            "once.example.com",
            None,
            Effect::Allow,
            GrantScope::Once,
            GrantTarget::Sandbox("sb1".into()),
        ));
        let past = Timestamp::now().minus(std::time::Duration::from_secs(10));
        let mut expired = grant(
            "old.example.com",
            None,
            Effect::Allow,
            GrantScope::Until(Timestamp::now().plus(std::time::Duration::from_millis(50))),
            GrantTarget::Global,
        );
        expired.created = past;
        add(expired);
        let cache = GrantCache::new(store.clone());
        cache.reload().unwrap();
        let allow = |sb: &str, project: Option<&str>, h: &str, port: u16| {
            cache.find(Effect::Allow, sb, project, &host(h), port).is_some()
        };
        // Session grants: that sandbox only.
        assert!(allow("sb1", None, "a.example.com", 443));
        assert!(!allow("sb2", Some("p1"), "a.example.com", 443));
        // Project grants: that project, that port, subdomains not the apex.
        assert!(allow("sb2", Some("p1"), "x.proj.example", 443));
        assert!(!allow("sb2", Some("p1"), "x.proj.example", 80));
        assert!(!allow("sb2", Some("p1"), "proj.example", 443));
        assert!(!allow("sb2", Some("p2"), "x.proj.example", 443));
        // Global grants: everyone; deny grants are found separately (and win in the adapters).
        assert!(allow("sb9", None, "g.example.com", 1));
        assert!(cache.find(Effect::Deny, "sb9", None, &host("bad.g.example.com"), 443).is_some());
        assert!(cache.find(Effect::Deny, "sb9", None, &host("g.example.com"), 443).is_none());
        // Once grants are for the requests that were waiting, never later ones.
        assert!(!allow("sb1", None, "once.example.com", 443));
        let _ = once;
        // A 403 lists the allow grants that apply (port included), not the deny ones, not
        // another sandbox's or project's, not once grants.
        assert_eq!(
            cache.listed("sb1", Some("p1")),
            ["a.example.com", "*.proj.example:443", "g.example.com", "old.example.com"]
        );
        assert_eq!(cache.listed("sb2", Some("p2")), ["g.example.com", "old.example.com"]);
        // Expired grants stop matching without a reload.
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(!allow("sb1", None, "old.example.com", 443));
        assert_eq!(cache.listed("sb2", Some("p2")), ["g.example.com"], "nor expired ones");
        // Revoked: gone after the reload the daemon does on every change.
        let all = store.list_grants(GrantList::All).unwrap();
        let g = all.iter().find(|g| g.grant.pattern == "g.example.com").unwrap();
        store.revoke_grant(g.id, Timestamp::now()).unwrap();
        cache.reload().unwrap();
        assert!(!allow("sb9", None, "g.example.com", 1));
    }

    /// Issue 32, part 6 (the flaky `a_deny_command_releases_the_held_request_with_a_403`): a
    /// person's session answer comes while the sandbox's row is still queued for the records
    /// thread. The grant waits for the row and is stored; before the fix it failed ("no sandbox")
    /// while the chat was told the answer, and `rules` then listed nothing. The records thread is
    /// held until the writer is seen waiting for it (two operations queued: the row, the
    /// writer's flush), or until the writer returned: that would be the bug.
    #[test]
    fn a_grant_for_a_sandbox_whose_row_is_still_queued_waits_for_it() {
        use approvals::GrantWriter as _;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let (hold, held) = std::sync::mpsc::channel();
        let records = Records::start_after(store.clone(), Some(held));
        records.register(sandgate_store::NewSandbox {
            id: "sb1".into(),
            tier: "net".into(),
            command: vec!["curl".into()],
            cwd: "/p".into(),
            project: Some("/p".into()),
            uid: 0,
            pid: 1,
            started: Timestamp::now(),
        });
        let writer = Writer {
            store: store.clone(),
            grants: Arc::new(GrantCache::new(store.clone())),
            records: records.clone(),
        };
        let at = SystemTime::now();
        let request = approvals::GrantRequest {
            pattern: "127.0.0.1".into(),
            port: Some(8080),
            effect: Effect::Deny,
            scope: approvals::Scope::Session,
            target: GrantTarget::Sandbox("sb1".into()),
            expires: None,
            by: approvals::Responder::new(approvals::Channel::Telegram, "@bob"),
            at,
        };
        let writing = std::thread::spawn(move || writer.write(&request));
        let started = std::time::Instant::now();
        while records.backlog() < 2 && !writing.is_finished() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "stuck");
            std::thread::yield_now();
        }
        assert!(
            !writing.is_finished(),
            "the grant was written before the sandbox's row: {:?}",
            writing.join()
        );
        hold.send(()).unwrap();
        let id = writing.join().unwrap().expect("the grant is stored");
        let all = store.list_grants(GrantList::All).unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!((all[0].id.wire(), all[0].grant.effect), (id, Effect::Deny));
    }

    #[test]
    fn grant_lines_say_what_whom_and_who() {
        let g = Grant {
            id: sandgate_store::GrantId(7),
            grant: grant(
                "crates.io",
                Some(443),
                Effect::Allow,
                GrantScope::Always,
                GrantTarget::Global,
            ),
            used: None,
            revoked: None,
        };
        let line = format_grant(&g);
        assert!(line.starts_with("#7"), "{line}");
        for part in ["allow", "crates.io:443", "always", "global", "by alice via cli"] {
            assert!(line.contains(part), "{line}");
        }
        assert!(describe(&g).contains("#7 (always, global)"));
    }

    /// Thousands of grants of every target, effect, port and scope: the sets answer as a scan of
    /// every grant (the matcher before them) does, for hosts that hit and miss.
    #[test]
    fn many_grants_match_as_a_scan_of_every_grant_would() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let now = Timestamp::now();
        let hour = std::time::Duration::from_secs(3600);
        for i in 0..5 {
            store
                .register_sandbox(&sandgate_store::NewSandbox {
                    id: format!("sb{i}"),
                    tier: "net".into(),
                    command: vec!["x".into()],
                    cwd: "/p".into(),
                    project: Some("p1".into()),
                    uid: 0,
                    pid: 1,
                    started: now,
                })
                .unwrap();
        }
        let mut n = 0u32;
        for i in 0..1200u32 {
            let name = format!("h{}.d{}.example", i % 97, i % 13);
            let pattern = match i % 4 {
                0 => format!("*.d{}.example", i % 13),
                1 => format!("{name}:{}", 8000 + i % 3),
                _ => name,
            };
            let port = [None, Some(443), Some(8001)][(i % 3) as usize];
            let effect = if i % 7 == 0 { Effect::Deny } else { Effect::Allow };
            let scope = match i % 5 {
                0 => GrantScope::Always,
                1 => GrantScope::Session,
                2 => GrantScope::Until(now.plus(hour)),
                3 => GrantScope::Once,
                _ => GrantScope::Until(now.minus(hour)),
            };
            let target = match i % 6 {
                // (Session and once grants are a sandbox's.)
                _ if matches!(scope, GrantScope::Session | GrantScope::Once) => {
                    GrantTarget::Sandbox(format!("sb{}", i % 5))
                }
                0 => GrantTarget::Global,
                1 | 2 => GrantTarget::Sandbox(format!("sb{}", i % 5)),
                _ => GrantTarget::Project(format!("p{}", i % 4)),
            };
            let mut g = grant(&pattern, port, effect, scope, target);
            g.created = now.minus(2 * hour);
            store.add_grant(&g).unwrap();
            n += 1;
        }
        let cache = GrantCache::new(store.clone());
        assert!(cache.reload().unwrap() > 500, "most of the {n} grants are live");
        // The matcher this cache replaced: every live grant, in order.
        let live: Vec<Grant> = store
            .list_grants(GrantList::Live(Timestamp::now()))
            .unwrap()
            .into_iter()
            .filter(|g| g.grant.scope != GrantScope::Once)
            .collect();
        let scan = |effect: Effect, sb: &str, project: Option<&str>, h: &Host, port: u16| {
            live.iter().any(|g| {
                let usage = match effect {
                    Effect::Allow => PatternUse::Allow,
                    Effect::Deny => PatternUse::Deny,
                };
                g.grant.effect == effect
                    && match &g.grant.target {
                        GrantTarget::Sandbox(s) => s == sb,
                        GrantTarget::Project(p) => project == Some(p.as_str()),
                        GrantTarget::Global => true,
                    }
                    && g.grant.port.is_none_or(|p| p == port)
                    && DomainPattern::parse(&g.grant.pattern, usage).unwrap().matches(h, port)
            })
        };
        let (mut hits, mut checked) = (0, 0);
        for i in 0..130u32 {
            let h = host(&format!("h{}.d{}.example", i % 101, i % 14));
            for sb in ["sb0", "sb3", "sb9"] {
                for project in [None, Some("p1"), Some("p3")] {
                    for port in [443, 8000, 8001, 8002] {
                        for effect in [Effect::Allow, Effect::Deny] {
                            let want = scan(effect, sb, project, &h, port);
                            let got = cache.find(effect, sb, project, &h, port);
                            assert_eq!(
                                got.is_some(),
                                want,
                                "{effect:?} {sb} {project:?} {h}:{port}"
                            );
                            if let Some(rule) = got {
                                // The rule cited is a grant's, and covers what was asked.
                                assert!(matches!(rule.source, RuleSource::Grant(_)), "{rule}");
                                let pattern = rule.pattern.as_ref().unwrap();
                                assert!(pattern.matches(&h, port), "{rule} for {h}:{port}");
                            }
                            hits += usize::from(want);
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(hits > 100 && hits < checked - 100, "{hits} of {checked}: both answers are tested");
    }

    /// A period after the cap began counting, what it held back is stored without waiting for
    /// the sandbox's next event or its end (a sandbox that floods, gets data out, then idles for
    /// hours): the refusals not stored (told to subscribers too) and the summary of the
    /// requests let through after the first.
    #[tokio::test]
    async fn what_the_cap_held_back_is_stored_when_its_period_ends() {
        use std::time::Duration;

        use crate::event_cap::{BURST, EventCap};

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let writer = sandgate_store::EventWriter::start(&store, Default::default()).unwrap();
        let mut committed = writer.subscribe();
        let (bus, mut told) = broadcast::channel(4096);
        let shared = Arc::new_cyclic(|me| Shared {
            records: Records::start(store.clone()),
            store: store.clone(),
            events: writer.sender(),
            writer: Mutex::new(Some(writer)),
            telegram: std::sync::OnceLock::new(),
            broker: approvals::Broker::new(approvals::BrokerConfig::default(), None),
            grants: Arc::new(GrantCache::new(store.clone())),
            sandboxes: Registry::default(),
            bus,
            cap: EventCap::with_period(1, Duration::from_millis(200)),
            unattended: false,
            me: me.clone(),
            fences: Default::default(),
            monitor_error: Default::default(),
            telemetry: None,
        });
        let request = |decision: &str, path: &str| Event::Request {
            sandbox: "sg-1".into(),
            method: "POST".into(),
            host: "h.example".into(),
            port: 443,
            path: Some(path.into()),
            decision: decision.into(),
            rule: "r".into(),
            bytes_up: 7,
            bytes_down: 1,
            ms: 1.0,
            error: None,
            count: 1,
            samples: Vec::new(),
            process: None,
        };
        for _ in 0..BURST + 5 {
            shared.publish(EventKind::Decision, Some("sg-1"), request("deny", "/d"));
        }
        for path in ["/a", "/b", "/c"] {
            shared.publish(EventKind::Decision, Some("sg-1"), request("allow", path));
        }
        let within = Duration::from_secs(10);
        let not_stored = tokio::time::timeout(within, async {
            loop {
                if let Ok(Event::EventsCapped { not_stored, decision, .. }) = told.recv().await {
                    return (not_stored, decision);
                }
            }
        })
        .await
        .expect("the refusals' report, told");
        assert_eq!(not_stored, (5, "deny".to_owned()));
        // Both are committed without another event of the sandbox.
        let (mut capped, mut summary) = (None, None);
        tokio::time::timeout(within, async {
            while capped.is_none() || summary.is_none() {
                let Ok(e) = committed.recv().await else { continue };
                let d = &e.event.details;
                if d["event"] == "events_capped" {
                    capped = Some(e.clone());
                } else if d["decision"] == "allow" && d["count"] == 2 {
                    summary = Some(e.clone());
                }
            }
        })
        .await
        .expect("both reports, committed");
        let (capped, summary) = (capped.unwrap(), summary.unwrap());
        assert_eq!(capped.event.kind, EventKind::Decision);
        assert_eq!(capped.event.details["standing_for"], 5);
        assert_eq!(summary.event.kind, EventKind::Decision);
        let d = &summary.event.details;
        assert_eq!((d["host"].as_str(), d["port"].as_u64()), (Some("h.example"), Some(443)));
        assert_eq!(
            (d["bytes_up"].as_u64(), d["samples"].clone()),
            (Some(14), serde_json::json!(["POST /b", "POST /c"]))
        );
        // The first allowed request was stored by itself; the burst of refusals too.
        let all = store
            .recent_events(&sandgate_store::EventQuery { limit: 5000, ..Default::default() })
            .unwrap();
        let allowed: Vec<_> =
            all.iter().filter(|e| e.event.details["decision"] == "allow").collect();
        assert_eq!(allowed.len(), 2);
        assert!(allowed.iter().any(|e| e.event.details["path"] == "/a"));
        let denied = all.iter().filter(|e| e.event.details["decision"] == "deny").count();
        assert_eq!(denied, BURST as usize + 1, "the burst and the report");
    }
}
