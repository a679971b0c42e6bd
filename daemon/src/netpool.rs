//! The daemon's pool of networks made ahead for `net` and `build` launches (Linux; see
//! `sandgate_sandbox::NetworkFactory` for what a prepared network is and who owns it).
//!
//! Two are kept ready. A launcher takes one (`take_network`, on its own connection, before its
//! clone); its sandbox joins it and it registers the network's sockets as any launcher does. The
//! pool keeps the network's route device (the tun) until the sandbox ends, so that the device's
//! teardown (an RCU grace period) is the daemon's work, after the launcher has its answer, not
//! the sandbox's exit's. A launch that finds the pool empty (or the pool off:
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

/// A network handed out whose sandbox never registered is let go after this long.
const UNCLAIMED: Duration = Duration::from_secs(60);

/// How long the daemon keeps a sandbox's route device after the sandbox ended: its processes
/// are gone by then (a background process that outlived the command a moment still finds its
/// direct connections logged and refused, not unroutable).
const LINGER: Duration = Duration::from_millis(200);

/// When a network was taken and others are left, the pool is refilled after this long even if no
/// sandbox ended.
const REFILL_AT_LATEST: Duration = Duration::from_secs(1);

/// How long after a sandbox's end the pool is refilled (its teardown and its launcher's exit
/// come first).
const REFILL_AFTER_END: Duration = Duration::from_millis(5);

/// The pool.
#[derive(Default)]
pub struct NetPool {
    #[cfg(target_os = "linux")]
    factory: Option<Mutex<NetworkFactory>>,
    /// Ready networks, one queue per kind of [`KINDS`].
    #[cfg(target_os = "linux")]
    ready: Mutex<[Vec<PreparedNetwork>; 2]>,
    /// Route devices of networks handed out, by sandbox id, until the sandbox ends.
    taken: Mutex<HashMap<String, (Option<OwnedFd>, Instant)>>,
    making: AtomicBool,
    /// The factory stopped: no more networks until the daemon restarts.
    dead: AtomicBool,
    made: AtomicU64,
    handed: AtomicU64,
    /// Why the pool is off, or why its last attempt failed.
    error: Mutex<Option<String>>,
}

impl NetPool {
    /// Forks the factory (Linux; call while the process has one thread), unless
    /// `SANDGATE_NETWORK_POOL=0`. A factory that cannot start leaves the pool off, saying why.
    pub fn start() -> NetPool {
        let pool = NetPool::default();
        if std::env::var_os("SANDGATE_NETWORK_POOL").is_some_and(|v| v == "0") {
            *pool.error.lock().unwrap_or_else(|e| e.into_inner()) =
                Some("off (SANDGATE_NETWORK_POOL=0)".into());
            return pool;
        }
        #[cfg(target_os = "linux")]
        {
            let open_nflog: sandgate_sandbox::OpenNflog = |group| {
                sandgate_monitor::nflog::NflogSocket::open(group)
                    .map(|s| s.into_fd())
                    .map_err(|e| std::io::Error::other(format!("NFLOG group {group}: {e}")))
            };
            match NetworkFactory::start(open_nflog) {
                Ok(f) => NetPool { factory: Some(Mutex::new(f)), ..pool },
                Err(e) => {
                    *pool.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                    pool
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        pool
    }

    /// Makes networks until [`READY`] are ready (in the background; one maker at a time).
    pub fn refill(self: &Arc<Self>) {
        #[cfg(target_os = "linux")]
        {
            if self.factory.is_none()
                || self.dead.load(Ordering::Acquire)
                || self.making.swap(true, Ordering::AcqRel)
            {
                return;
            }
            let pool = self.clone();
            tokio::task::spawn_blocking(move || {
                loop {
                    let missing = {
                        let ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner());
                        (0..KINDS.len()).find(|&k| ready[k].len() < READY)
                    };
                    let Some(k) = missing else { break };
                    let Some(factory) = &pool.factory else { break };
                    let Some(id) = new_id() else { break };
                    let made = factory.lock().unwrap_or_else(|e| e.into_inner()).make(
                        &id,
                        crate::launch::defaults::NFLOG_GROUP,
                        KINDS[k],
                    );
                    match made {
                        Ok(n) => {
                            pool.made.fetch_add(1, Ordering::Relaxed);
                            pool.ready.lock().unwrap_or_else(|e| e.into_inner())[k].push(n);
                            *pool.error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                            let why = format!(
                                "{e}; launches make their own networks until the daemon restarts"
                            );
                            tracing::error!("{why}");
                            pool.dead.store(true, Ordering::Release);
                            *pool.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot prepare a sandbox network");
                            *pool.error.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(e.to_string());
                            break;
                        }
                    }
                }
                pool.making.store(false, Ordering::Release);
            });
        }
    }

    /// A ready network of `kind` for a launcher (its route device stays here, see
    /// [`NetPool::claim`]). A proxy network's pool is refilled once a sandbox ends
    /// ([`NetPool::refill_soon`]), so that the making does not compete with the launch it serves
    /// for the machine's cores; at once only when this was the last one (parallel launches), and
    /// after [`REFILL_AT_LATEST`] anyway. A loopback network (`run`, which the daemon does not
    /// hear the end of) costs little to make: at once.
    #[cfg(target_os = "linux")]
    pub fn take(self: &Arc<Self>, kind: NetKind) -> Option<PreparedNetwork> {
        let k = KINDS.iter().position(|&c| c == kind).unwrap_or(0);
        let (network, left) = {
            let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
            (ready[k].pop(), ready[k].len())
        };
        if left == 0 || kind == NetKind::Loopback {
            self.refill();
        } else {
            let pool = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(REFILL_AT_LATEST).await;
                pool.refill();
            });
        }
        let mut network = network?;
        self.handed.fetch_add(1, Ordering::Relaxed);
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.retain(|_, (_, at)| at.elapsed() < UNCLAIMED);
        if let Some(tun) = network.tun.take() {
            taken.insert(network.id.to_string(), (Some(tun), Instant::now()));
        }
        Some(network)
    }

    /// Refills a moment after a sandbox ended: after its launcher's own end, in the usual case.
    pub fn refill_soon(self: &Arc<Self>) {
        let pool = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REFILL_AFTER_END).await;
            pool.refill();
        });
    }

    /// The route device of the network handed out for sandbox `id`, now that it registered
    /// (its holder until the sandbox ends); `None` when it was not one of this pool's.
    pub fn claim(&self, id: &str) -> Option<OwnedFd> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner()).remove(id).and_then(|(tun, _)| tun)
    }

    /// For `status`: whether the pool is on, how many are ready, made and handed out.
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

/// Lets a sandbox's route device go a moment after the sandbox ended (see [`LINGER`]).
pub fn release_later(tun: Option<Arc<OwnedFd>>) {
    if let Some(tun) = tun {
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            // The device's teardown waits for an RCU grace period: not on a runtime thread.
            let _ = tokio::task::spawn_blocking(move || drop(tun)).await;
        });
    }
}

/// An id like a launcher's (`sg-PID-NANOS`), the daemon's pid in it.
#[cfg(target_os = "linux")]
fn new_id() -> Option<sandgate_sandbox::SandboxId> {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    let text = format!("sg-{}-{nanos:08x}{n:x}", std::process::id());
    sandgate_sandbox::SandboxId::try_from(text).ok()
}
