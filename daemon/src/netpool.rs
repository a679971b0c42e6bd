//! The daemon's pool of networks made ahead (Linux; see `sandgate_sandbox::NetworkFactory` for
//! what a prepared network is and who owns it).
//!
//! Two of each kind are kept ready: loopback only (`run`) and proxy (`net`, `build`). A launcher
//! takes one (on the daemon's network socket of its kind, see `network_sockets`, before its
//! clone); its sandbox joins it and a `net`/`build` launcher registers the network's sockets as
//! any launcher does. The pool keeps
//! a proxy network's route device (the tun) until the sandbox ends, so that the device's
//! teardown (an RCU grace period) is the daemon's work, after the launcher has its answer, not
//! the sandbox's exit's. A launch that finds none ready (or the pool off:
//! `SANDGATE_NETWORK_POOL=0`, or a factory that cannot work here) makes its own network, as
//! before.

// Elsewhere the pool is only ever off (its status says so).
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sandgate_sandbox::NetKind;
#[cfg(target_os = "linux")]
use sandgate_sandbox::{NetworkFactory, PreparedNetwork};

/// Networks kept ready of each kind (two: an agent's parallel commands).
const READY: usize = 2;

/// The kinds, in the order of [`NetPool`]'s queues.
const KINDS: [NetKind; 2] = [NetKind::Proxy, NetKind::Loopback];

/// A route device whose sandbox never registered is let go after this long.
const UNCLAIMED: Duration = Duration::from_secs(60);

/// How long the daemon keeps a sandbox's route device after the sandbox ended: its processes
/// are gone by then (a background process that outlived the command a moment still finds its
/// direct connections logged and refused, not unroutable).
const LINGER: Duration = Duration::from_millis(200);

/// When a proxy network was taken and others are left, the pool is refilled after this long
/// even if no sandbox ended.
const REFILL_AT_LATEST: Duration = Duration::from_secs(1);

/// How long after a sandbox's end the pool is refilled (its teardown and its launcher's exit
/// come first).
const REFILL_AFTER_END: Duration = Duration::from_millis(5);

/// The queue of `kind` in [`KINDS`] order.
fn queue(kind: NetKind) -> usize {
    match kind {
        NetKind::Proxy => 0,
        NetKind::Loopback => 1,
    }
}

/// A route device the daemon holds for a sandbox.
struct Device {
    tun: OwnedFd,
    /// When it was handed out.
    since: Instant,
    /// Whether its sandbox registered (then it is kept until the sandbox ends).
    claimed: bool,
}

/// The pool.
#[derive(Default)]
pub struct NetPool {
    #[cfg(target_os = "linux")]
    factory: Option<Mutex<NetworkFactory>>,
    /// Ready networks, one queue per kind of [`KINDS`].
    #[cfg(target_os = "linux")]
    ready: Mutex<[Vec<PreparedNetwork>; 2]>,
    /// Route devices of networks handed out, by sandbox id, until the sandbox ends (or, never
    /// claimed, [`UNCLAIMED`] after).
    devices: Mutex<HashMap<String, Device>>,
    /// A refill is under way (one at a time).
    making: AtomicBool,
    /// The factory stopped: no more networks until the daemon restarts.
    dead: AtomicBool,
    made: AtomicU64,
    handed: AtomicU64,
    /// Why the pool is off, or why its last attempt failed.
    error: Mutex<Option<String>>,
}

/// Clears [`NetPool::making`] when a refill ends, also by a panic.
struct Making<'a>(&'a AtomicBool);

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl NetPool {
    /// Forks the factory (Linux; call while the process has one thread), unless
    /// `SANDGATE_NETWORK_POOL=0`. A factory that cannot start leaves the pool off, saying why.
    pub fn start() -> NetPool {
        let pool = NetPool::default();
        if std::env::var_os("SANDGATE_NETWORK_POOL").is_some_and(|v| v == "0") {
            pool.say(Some("off (SANDGATE_NETWORK_POOL=0)".into()));
            return pool;
        }
        #[cfg(target_os = "linux")]
        {
            match NetworkFactory::start(crate::monitor::open_nflog) {
                Ok(f) => NetPool { factory: Some(Mutex::new(f)), ..pool },
                Err(e) => {
                    pool.say(Some(e.to_string()));
                    pool
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        pool
    }

    fn say(&self, error: Option<String>) {
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// Makes networks until [`READY`] of each kind are ready (in the background; one refill at a
    /// time: a request that comes while one runs is seen by it before it ends). A kind that
    /// cannot be made is left for this round; the other is still made.
    pub fn refill(self: &Arc<Self>) {
        #[cfg(target_os = "linux")]
        {
            if self.factory.is_none() || self.dead.load(Ordering::Acquire) {
                return;
            }
            if self.making.swap(true, Ordering::AcqRel) {
                return;
            }
            let pool = self.clone();
            tokio::task::spawn_blocking(move || {
                loop {
                    let guard = Making(&pool.making);
                    pool.refill_round();
                    drop(guard);
                    // A take between the round's last look and the flag's clearing found the
                    // flag set and left its refill to this one: look again.
                    if !pool.missing().iter().any(|&m| m)
                        || pool.dead.load(Ordering::Acquire)
                        || pool.making.swap(true, Ordering::AcqRel)
                    {
                        break;
                    }
                }
                pool.purge();
            });
        }
    }

    /// Which kinds lack networks.
    #[cfg(target_os = "linux")]
    fn missing(&self) -> [bool; 2] {
        let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        [ready[0].len() < READY, ready[1].len() < READY]
    }

    #[cfg(target_os = "linux")]
    fn refill_round(&self) {
        let Some(factory) = &self.factory else { return };
        let mut failed = [false; 2];
        loop {
            let missing = self.missing();
            let Some(k) = (0..KINDS.len()).find(|&k| missing[k] && !failed[k]) else { return };
            let Some(id) = crate::launch_env::new_id() else { return };
            let group = crate::launch_env::defaults::NFLOG_GROUP;
            let made = factory.lock().unwrap_or_else(|e| e.into_inner()).make(&id, group, KINDS[k]);
            match made {
                Ok(n) => {
                    self.made.fetch_add(1, Ordering::Relaxed);
                    self.ready.lock().unwrap_or_else(|e| e.into_inner())[k].push(n);
                    self.say(None);
                }
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    let why =
                        format!("{e}; launches make their own networks until the daemon restarts");
                    tracing::error!("{why}");
                    self.dead.store(true, Ordering::Release);
                    self.say(Some(why));
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, kind = KINDS[k].name(), "cannot prepare a network");
                    self.say(Some(format!("{} networks: {e}", KINDS[k].name())));
                    failed[k] = true;
                }
            }
        }
    }

    /// A ready network of `kind` for a launcher (a proxy network's route device stays here, see
    /// [`NetPool::claim`]). The caller hands it out first and then calls [`NetPool::taken`],
    /// which starts the refill: the launcher's answer does not wait for a thread to start.
    #[cfg(target_os = "linux")]
    pub fn take(self: &Arc<Self>, kind: NetKind) -> Option<PreparedNetwork> {
        let network = self.ready.lock().unwrap_or_else(|e| e.into_inner())[queue(kind)].pop();
        let mut network = network?;
        self.handed.fetch_add(1, Ordering::Relaxed);
        if let Some(tun) = network.tun.take() {
            let device = Device { tun, since: Instant::now(), claimed: false };
            self.devices
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(network.id.to_string(), device);
        }
        Some(network)
    }

    /// A network of `kind` was asked for (handed out or not): refill. Proxy networks are refilled
    /// once a sandbox ends ([`NetPool::refill_soon`]), so that the making does not compete with
    /// the launch it serves for the machine's cores; at once only when none is left (parallel
    /// launches), and after [`REFILL_AT_LATEST`] anyway. A loopback network (`run`, whose end
    /// the daemon does not hear of) costs little to make: at once.
    #[cfg(target_os = "linux")]
    pub fn taken(self: &Arc<Self>, kind: NetKind) {
        let left = self.ready.lock().unwrap_or_else(|e| e.into_inner())[queue(kind)].len();
        if left == 0 || kind == NetKind::Loopback {
            self.refill();
        } else {
            let pool = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(REFILL_AT_LATEST).await;
                pool.refill();
            });
        }
    }

    /// Refills a moment after a sandbox ended: after its launcher's own end, in the usual case.
    pub fn refill_soon(self: &Arc<Self>) {
        let pool = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REFILL_AFTER_END).await;
            pool.refill();
        });
    }

    /// Sandbox `id` registered: the route device of its network (if it is one of this pool's)
    /// is kept until [`NetPool::release`].
    pub fn claim(&self, id: &str) {
        if let Some(d) = self.devices.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            d.claimed = true;
        }
    }

    /// Sandbox `id` ended: its route device goes a moment later ([`LINGER`]), off the runtime's
    /// threads (the device's teardown waits for an RCU grace period).
    pub fn release(&self, id: &str) {
        let device = self.devices.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        if let Some(Device { tun, .. }) = device {
            tokio::spawn(async move {
                tokio::time::sleep(LINGER).await;
                let _ = tokio::task::spawn_blocking(move || drop(tun)).await;
            });
        }
    }

    /// Lets go of route devices whose sandbox never registered (a launch that failed or chose
    /// another network), [`UNCLAIMED`] after they were handed out.
    fn purge(&self) {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, d| d.claimed || d.since.elapsed() < UNCLAIMED);
    }

    /// For `status`: whether the pool is on, how many of each kind are ready, made and handed
    /// out, and the last error.
    pub fn status(&self) -> Value {
        #[cfg(target_os = "linux")]
        let (on, ready) = {
            let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
            let on = self.factory.is_some() && !self.dead.load(Ordering::Acquire);
            (on, [ready[0].len(), ready[1].len()])
        };
        #[cfg(not(target_os = "linux"))]
        let (on, ready) = (false, [0, 0]);
        json!({
            "on": on,
            "ready": { KINDS[0].name(): ready[0], KINDS[1].name(): ready[1] },
            "made": self.made.load(Ordering::Relaxed),
            "handed_out": self.handed.load(Ordering::Relaxed),
            "error": *self.error.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }
}
