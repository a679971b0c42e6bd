//! The proxy value, its configuration, and the decision stages shared by tunnels and forwarding.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use sandgate_config::{Decision, Host, NetworkPolicy, Rule, Target};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};

use crate::ask::Asks;
use crate::attribution::{Attribution, Attributor};
use crate::denial::Refusal;
use crate::guard::{self, OwnAddresses};
use crate::interceptor::Interceptor;
use crate::io::{ClientStream, Listener, connect_tcp};
use crate::pool::Pool;
use crate::traits::{
    ApprovalRequest, Approver, DenyReason, EventSink, GrantSource, ProxyToken, Resolver, Ruling,
    SandboxId, SystemResolver, TracingSink,
};
use crate::tunnel::PipePool;

/// How far ahead the timer anchor's deadline is (see [`Proxy::anchor_timers`]): shorter than any
/// per-connection deadline with the default configuration.
const TIMER_ANCHOR: Duration = Duration::from_secs(1);

/// How tunnels move bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelMode {
    /// splice(2) through a pipe: the bytes never enter user space.
    Splice,
    /// `copy_bidirectional` with large buffers.
    Copy,
}

/// Limits and timeouts.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// How long a client may take to send a complete request head (slow clients are dropped).
    pub header_timeout: Duration,
    /// How long a tunnel or keep-alive connection may sit without traffic.
    pub idle_timeout: Duration,
    /// How long a request is held waiting for a person's answer (then it is denied).
    pub ask_timeout: Duration,
    /// How long to wait for one upstream address to accept a connection.
    pub connect_timeout: Duration,
    /// Largest request head, in bytes.
    pub max_head_bytes: usize,
    /// Buffer size of each direction in [`TunnelMode::Copy`].
    pub tunnel_buffer: usize,
    /// How tunnels move bytes.
    pub tunnel_mode: TunnelMode,
    /// An upstream proxy every admitted connection leaves through (but for its bypass list).
    pub upstream: Option<Arc<crate::upstream::Upstream>>,
    /// How long a question, or a refusal's event, waits for the [`Attributor`] to name the
    /// process that opened the connection (then it goes on without it).
    pub attribution_wait: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            ask_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_head_bytes: crate::head::MAX_HEAD_BYTES,
            tunnel_buffer: 256 * 1024,
            tunnel_mode: TunnelMode::Splice,
            upstream: None,
            attribution_wait: Duration::from_millis(100),
        }
    }
}

/// What a listener serves: which sandbox, under which policy, with which token.
#[derive(Clone, Debug)]
pub struct SandboxContext {
    /// The sandbox.
    pub id: SandboxId,
    /// Its network policy (replace it at run time with [`Proxy::set_policy`]).
    pub policy: Arc<NetworkPolicy>,
    /// When set, clients must present it in `Proxy-Authorization` (407 otherwise).
    pub token: Option<ProxyToken>,
}

/// A sandbox as the proxy holds it while at least one listener serves it.
#[derive(Debug)]
pub(crate) struct Sandbox {
    pub(crate) id: SandboxId,
    policy: RwLock<Arc<NetworkPolicy>>,
    pub(crate) token: Option<ProxyToken>,
    /// The addresses its DNS stub gave out, by name.
    pub(crate) names: crate::names::Names,
}

impl Sandbox {
    pub(crate) fn policy(&self) -> Arc<NetworkPolicy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Builds a [`Proxy`].
pub struct ProxyBuilder {
    config: ProxyConfig,
    approver: Option<Arc<dyn Approver>>,
    grants: Option<Arc<dyn GrantSource>>,
    events: Arc<dyn EventSink>,
    resolver: Arc<dyn Resolver>,
    interceptor: Option<Arc<Interceptor>>,
    attributor: Option<Arc<dyn Attributor>>,
}

impl ProxyBuilder {
    /// Names the process behind each connection (in questions and events). Without it, none is
    /// named.
    pub fn attributor(mut self, attributor: Arc<dyn Attributor>) -> Self {
        self.attributor = Some(attributor);
        self
    }

    /// Enables the `intercept` stage (hosts named by a sandbox's secrets or HTTP rules). Without
    /// it, a tunnel to such a host is closed rather than spliced.
    pub fn interceptor(mut self, interceptor: Arc<Interceptor>) -> Self {
        self.interceptor = Some(interceptor);
        self
    }

    /// Sets limits and timeouts.
    pub fn config(mut self, config: ProxyConfig) -> Self {
        self.config = config;
        self
    }

    /// Who to ask about unknown destinations (without one, they are denied).
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Where grants come from.
    pub fn grants(mut self, grants: Arc<dyn GrantSource>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// Where events go (default: the tracing log).
    pub fn events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = events;
        self
    }

    /// How names are resolved (default: the system resolver).
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Builds the proxy.
    pub fn build(self) -> Proxy {
        let (shutdown, _) = watch::channel(false);
        Proxy {
            inner: Arc::new(ProxyShared {
                config: self.config,
                approver: self.approver,
                grants: self.grants,
                events: self.events,
                resolver: self.resolver,
                interceptor: self.interceptor,
                attributor: self.attributor,
                asks: Asks::default(),
                dns_cache: Default::default(),
                own: OwnAddresses::default(),
                pool: Pool::default(),
                pipes: PipePool::default(),
                sandboxes: Mutex::new(HashMap::new()),
                shutdown,
                active: AtomicUsize::new(0),
                timer_anchor: AtomicBool::new(false),
                drained: Notify::new(),
            }),
        }
    }
}

/// The proxy: one value (cheap to clone) serving any number of listeners and sandboxes.
#[derive(Clone)]
pub struct Proxy {
    pub(crate) inner: Arc<ProxyShared>,
}

/// What every connection of one [`Proxy`] shares: its configuration, the approver and grant
/// source, the event sink, the resolver, the interceptor and the registered sandboxes.
pub(crate) struct ProxyShared {
    pub(crate) config: ProxyConfig,
    approver: Option<Arc<dyn Approver>>,
    grants: Option<Arc<dyn GrantSource>>,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) interceptor: Option<Arc<Interceptor>>,
    pub(crate) attributor: Option<Arc<dyn Attributor>>,
    asks: Asks,
    /// Addresses the DNS stub resolved, per name.
    pub(crate) dns_cache: crate::dns_log::DnsCache,
    own: OwnAddresses,
    pub(crate) pool: Pool,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only splice(2) needs it
    pub(crate) pipes: PipePool,
    sandboxes: Mutex<HashMap<SandboxId, Weak<Sandbox>>>,
    pub(crate) shutdown: watch::Sender<bool>,
    active: AtomicUsize,
    /// Whether the timer anchor task (see [`Proxy::anchor_timers`]) runs.
    timer_anchor: AtomicBool,
    drained: Notify,
}

/// Addresses that passed the guard, and the rule that let the request through.
pub(crate) struct Admitted {
    pub(crate) rule: Arc<Rule>,
    pub(crate) addrs: Vec<SocketAddr>,
}

impl Proxy {
    /// A builder with the defaults: no approver, no grants, events to the tracing log, the system
    /// resolver.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder {
            config: ProxyConfig::default(),
            approver: None,
            grants: None,
            events: Arc::new(TracingSink),
            resolver: Arc::new(SystemResolver),
            interceptor: None,
            attributor: None,
        }
    }

    /// Serves `listener` for one sandbox until [`Proxy::shutdown`]. Listeners of the same
    /// sandbox id share one state: the latest context's policy replaces the policy, the token
    /// stays the one of the first listener still being served.
    pub async fn serve(
        &self,
        listener: impl Into<Listener>,
        ctx: SandboxContext,
    ) -> io::Result<()> {
        let listener = listener.into();
        let sandbox = self.register(ctx);
        let mut stop = self.inner.shutdown.subscribe();
        let nodelay_inherited = listener.nodelay_for_accepted();
        self.anchor_timers();
        tracing::debug!(sandbox = %sandbox.id, listen = %listener.describe(), "serving");
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let accepted = tokio::select! {
                a = listener.accept(nodelay_inherited) => a,
                _ = stop.changed() => return Ok(()),
            };
            match accepted {
                Ok(stream) => {
                    let (inner, sandbox) = (self.inner.clone(), sandbox.clone());
                    let guard = ActiveGuard::new(inner.clone());
                    tokio::spawn(async move {
                        inner.handle(sandbox, stream).await;
                        drop(guard);
                    });
                }
                Err(e) => {
                    // Out of file descriptors or a connection reset before accept: keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Keeps one timer pending, [`TIMER_ANCHOR`] ahead, for as long as the proxy serves.
    ///
    /// Every connection arms a few deadlines (request head, connect, idle), all further away than
    /// that. When tokio registers a timer earlier than the next wake-up its driver planned — always
    /// the case when no other timer is pending, as between the connections of a lone client — it
    /// wakes the I/O driver (an eventfd write and one more `epoll_wait`, or a context switch when
    /// another worker sleeps in it). With the anchor pending, the planned wake-up is never later
    /// than `TIMER_ANCHOR`, so a connection's deadlines go into the timer wheel without that.
    fn anchor_timers(&self) {
        if self.inner.timer_anchor.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut stop = self.inner.shutdown.subscribe();
        tokio::spawn(async move {
            while !*stop.borrow_and_update() {
                tokio::select! {
                    () = tokio::time::sleep(TIMER_ANCHOR) => {}
                    // Shut down, or the proxy is gone.
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// Replaces the policy of a sandbox that is being served; `false` when none is.
    pub fn set_policy(&self, id: &SandboxId, policy: Arc<NetworkPolicy>) -> bool {
        let map = self.inner.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(id).and_then(Weak::upgrade) {
            Some(sb) => {
                *sb.policy.write().unwrap_or_else(|e| e.into_inner()) = policy;
                true
            }
            None => false,
        }
    }

    /// Stops accepting on every listener and records the DNS stub's pending summaries
    /// ([`Proxy::flush_dns_refusals`]). Connections in progress continue; see [`Proxy::drain`].
    pub fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        self.flush_dns_refusals(None);
    }

    /// Waits until no connection is in progress, or `grace` passes; returns how many remain.
    pub async fn drain(&self, grace: Duration) -> usize {
        let wait = async {
            loop {
                let notified = self.inner.drained.notified();
                if self.inner.active.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(grace, wait).await;
        self.inner.active.load(Ordering::SeqCst)
    }

    /// How many requests of `sandbox` are held waiting for a person's answer about `target`.
    pub fn waiting(&self, sandbox: &SandboxId, target: &Target) -> usize {
        self.inner.asks.waiting(sandbox, target)
    }

    /// Number of connections in progress.
    pub fn active_connections(&self) -> usize {
        self.inner.active.load(Ordering::SeqCst)
    }

    pub(crate) fn register(&self, ctx: SandboxContext) -> Arc<Sandbox> {
        let mut map = self.inner.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        if let Some(sb) = map.get(&ctx.id).and_then(Weak::upgrade) {
            *sb.policy.write().unwrap_or_else(|e| e.into_inner()) = ctx.policy;
            return sb;
        }
        let sb = Arc::new(Sandbox {
            id: ctx.id.clone(),
            policy: RwLock::new(ctx.policy),
            token: ctx.token,
            names: Default::default(),
        });
        map.insert(ctx.id, Arc::downgrade(&sb));
        sb
    }
}

/// Counts a connection as active while it lives.
struct ActiveGuard(Arc<ProxyShared>);

impl ActiveGuard {
    fn new(inner: Arc<ProxyShared>) -> ActiveGuard {
        inner.active.fetch_add(1, Ordering::SeqCst);
        ActiveGuard(inner)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl ProxyShared {
    /// Starts the lookup of the process behind an accepted connection (nothing without an
    /// attributor, or for a client on a Unix socket). `redirected` is the original destination
    /// of a transparent connection: the client's socket is connected there, not to the proxy.
    pub(crate) fn attribute(
        &self,
        sandbox: &Sandbox,
        client: &ClientStream,
        redirected: Option<SocketAddr>,
    ) -> Attribution {
        let (Some(attributor), ClientStream::Tcp(s)) = (&self.attributor, client) else {
            return Attribution::none();
        };
        let (Ok(peer), Ok(local)) = (s.peer_addr(), s.local_addr()) else {
            return Attribution::none();
        };
        Attribution::start(attributor, sandbox.id.clone(), peer, redirected.unwrap_or(local))
    }
}

impl ProxyShared {
    /// Stages `decide` → `ask` → `upstream_peer` for one target (see [`ProxyShared::admit`], which
    /// runs them over a request's context).
    pub(crate) async fn admit_target(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
        method: &str,
        path: Option<&str>,
        process: &Attribution,
    ) -> Result<Admitted, Refusal> {
        let rule = self.decide(sandbox, policy, target, method, path, process).await?;
        let addrs = match target.host {
            // An address asked for by number was itself allowed (by a rule, a grant or a
            // person's answer): that is the "allowed by IP" exception of the guard.
            Host::Ip(ip) => vec![SocketAddr::new(sandgate_config::canonical_ip(ip), target.port)],
            // `localhost` allowed (by a rule, a grant or a person) means the host's loopback, on
            // the allowed port only: it is never resolved (RFC 6761), so no resolver or hosts
            // file can point it elsewhere, and the guard's loopback refusal does not apply.
            Host::Name(ref n) if n.as_str() == "localhost" => vec![
                SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), target.port),
                SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), target.port),
            ],
            // Through an upstream proxy the name is its to resolve: nothing to check here.
            Host::Name(_) if self.via_upstream(target) => Vec::new(),
            Host::Name(_) => self.upstream_peer(sandbox, policy, target).await?,
        };
        Ok(Admitted { rule, addrs })
    }

    /// Stages `decide` and `ask`: deny rules, allow rules, grants, then a person.
    async fn decide(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
        method: &str,
        path: Option<&str>,
        process: &Attribution,
    ) -> Result<Arc<Rule>, Refusal> {
        match policy.decide(target) {
            Decision::Allow(rule) => return Ok(rule),
            Decision::Deny(rule) => {
                return Err(Refusal::Deny { target: target.to_string(), rule });
            }
            Decision::Ask => {}
        }
        if let Some(rule) = self.grant(sandbox, target).await {
            return Ok(rule);
        }
        let Some(approver) = &self.approver else {
            return Err(Refusal::NoApprover { target: target.to_string() });
        };
        let question = ApprovalRequest {
            sandbox: sandbox.id.clone(),
            target: target.clone(),
            method: method.to_owned(),
            path: path.map(str::to_owned),
            process: process.wait(self.config.attribution_wait).await,
        };
        match self.asks.ask(approver, question, self.config.ask_timeout).await {
            Ruling::Allow(rule) => Ok(rule),
            Ruling::Deny(DenyReason::Rule(rule)) => {
                Err(Refusal::Deny { target: target.to_string(), rule })
            }
            Ruling::Deny(DenyReason::Denied) => Err(Refusal::Denied { target: target.to_string() }),
            Ruling::Deny(DenyReason::TimedOut) => Err(Refusal::AskTimedOut {
                target: target.to_string(),
                after: self.config.ask_timeout,
            }),
            Ruling::Deny(DenyReason::TooManyQuestions(open)) => {
                Err(Refusal::TooManyQuestions { target: target.to_string(), open })
            }
            Ruling::Deny(DenyReason::OverBudget { limit, window }) => {
                Err(Refusal::OverBudget { target: target.to_string(), limit, window })
            }
            Ruling::Deny(DenyReason::Unattended) => {
                Err(Refusal::Unattended { target: target.to_string() })
            }
        }
    }

    /// Stage `ask` for a request its host's `[[http_rules]]` do not allow: a person may let this
    /// one request through (their answer covers it only; the rules stay as written); without an
    /// approver, or on any other answer, it is refused with the rules in the body.
    pub(crate) async fn ask_request(
        &self,
        sandbox: &Sandbox,
        target: &Target,
        method: &str,
        path: &str,
        rules: &sandgate_config::HttpRules,
        process: &Attribution,
    ) -> Result<(), Refusal> {
        let refusal = || Refusal::PathNotAllowed {
            target: target.to_string(),
            method: method.to_owned(),
            path: path.chars().take(200).collect(),
            rules_at: rules.origin.to_string(),
            allowed: rules.allow.iter().map(ToString::to_string).collect(),
        };
        let Some(approver) = &self.approver else { return Err(refusal()) };
        let question = ApprovalRequest {
            sandbox: sandbox.id.clone(),
            target: target.clone(),
            method: method.to_owned(),
            path: Some(path.to_owned()),
            process: process.wait(self.config.attribution_wait).await,
        };
        match self.asks.ask(approver, question, self.config.ask_timeout).await {
            Ruling::Allow(_) => Ok(()),
            Ruling::Deny(_) => Err(refusal()),
        }
    }

    /// The allow grants that apply to `sandbox` now, as a 403 lists them.
    pub(crate) fn granted(&self, sandbox: &Sandbox) -> Vec<String> {
        self.grants.as_ref().map(|g| g.listed(&sandbox.id)).unwrap_or_default()
    }

    pub(crate) async fn grant(&self, sandbox: &Sandbox, target: &Target) -> Option<Arc<Rule>> {
        match &self.grants {
            Some(g) => g.grant_for(&sandbox.id, target).await,
            None => None,
        }
    }

    /// Whether the policy (or a grant) allows `host:port` outright, without asking anyone.
    pub(crate) async fn allowed_outright(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
    ) -> bool {
        match policy.decide(target) {
            Decision::Allow(_) => true,
            Decision::Deny(_) => false,
            Decision::Ask => self.grant(sandbox, target).await.is_some(),
        }
    }

    /// Stage `upstream_peer`: resolve and keep the addresses the guard lets through.
    async fn upstream_peer(
        &self,
        sandbox: &Sandbox,
        policy: &NetworkPolicy,
        target: &Target,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let resolved = match &target.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, target.port)],
            Host::Name(name) => match self.resolver.resolve(name, target.port).await {
                Ok(addrs) if !addrs.is_empty() => addrs,
                Ok(_) => {
                    return Err(Refusal::Unresolvable {
                        target: target.to_string(),
                        error: "no addresses".into(),
                    });
                }
                Err(e) => {
                    return Err(Refusal::Unresolvable {
                        target: target.to_string(),
                        error: e.to_string(),
                    });
                }
            },
        };
        let mut passed = Vec::with_capacity(resolved.len());
        let mut first_refused = None;
        for addr in resolved {
            let ip = sandgate_config::canonical_ip(addr.ip());
            let addr = SocketAddr::new(ip, target.port);
            match self.forbidden(ip) {
                None => passed.push(addr),
                Some(why) => {
                    let ip_target = Target { host: Host::Ip(ip), port: target.port };
                    if self.allowed_outright(sandbox, policy, &ip_target).await {
                        passed.push(addr);
                    } else if first_refused.is_none() {
                        first_refused = Some((ip, why));
                    }
                }
            }
        }
        match (passed.is_empty(), first_refused) {
            (true, Some((ip, why))) => {
                if let Some(a) = &self.approver {
                    a.guard_refused(&sandbox.id, target, ip, why);
                }
                Err(Refusal::ForbiddenAddress { target: target.to_string(), ip, why })
            }
            _ => Ok(passed),
        }
    }

    pub(crate) fn forbidden(&self, ip: IpAddr) -> Option<guard::Forbidden> {
        guard::classify(ip)
            .or_else(|| self.own.contains(ip).then_some(guard::Forbidden::OwnAddress))
    }

    /// Whether `target` leaves through the upstream proxy.
    pub(crate) fn via_upstream(&self, target: &Target) -> bool {
        self.config.upstream.as_ref().is_some_and(|u| u.applies_to(target))
    }

    /// Stage `connect`: the checked addresses, in order, until one accepts (or a tunnel
    /// through the upstream proxy).
    pub(crate) async fn connect(
        &self,
        target: &Target,
        addrs: &[SocketAddr],
    ) -> Result<TcpStream, Refusal> {
        if let Some(up) = self.config.upstream.as_ref().filter(|u| u.applies_to(target)) {
            return up
                .connect(target, self.config.connect_timeout)
                .await
                .map_err(|error| Refusal::Unreachable { target: target.to_string(), error });
        }
        let mut last = String::from("no address to connect to");
        for addr in addrs {
            // A connection that completes at once (loopback) never arms the timer.
            match tokio::time::timeout(self.config.connect_timeout, connect_tcp(*addr)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => {
                    last = format!(
                        "{addr}: no answer within {}s",
                        self.config.connect_timeout.as_secs()
                    );
                }
            }
        }
        Err(Refusal::Unreachable { target: target.to_string(), error: last })
    }
}
