//! Blocked traffic: the NFLOG socket of each sandbox, read by the daemon. Each batch of packets
//! becomes one event per destination (with a count) for the store, the subscribers, the
//! launcher (`--report-blocked`) and the Telegram bot (which deduplicates per window).

// NFLOG is Linux's; elsewhere only the stub below is compiled.
#![cfg_attr(not(target_os = "linux"), allow(unused_imports))]

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use sandgate_store::EventKind;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::adapters::Shared;
use crate::protocol::Event;

/// An NFLOG socket bound to `group` in the calling thread's network namespace (a sandbox's init,
/// or the network factory making one ahead).
#[cfg(target_os = "linux")]
pub fn open_nflog(group: u16) -> std::io::Result<OwnedFd> {
    sandgate_monitor::nflog::NflogSocket::open(group)
        .map(|s| s.into_fd())
        .map_err(|e| std::io::Error::other(format!("NFLOG group {group}: {e}")))
}

/// Reads `fd` until `stop`; then drains what is queued and hands it to `done` (so that the
/// launcher's `unregister` reply carries the last packets of the run).
#[cfg(target_os = "linux")]
pub async fn read_nflog(
    s: Arc<Shared>,
    sandbox: String,
    fd: OwnedFd,
    launcher: mpsc::Sender<String>,
    mut stop: watch::Receiver<bool>,
    flush: Arc<std::sync::atomic::AtomicBool>,
    done: oneshot::Sender<Vec<Value>>,
) {
    use sandgate_monitor::nflog::NflogSocket;
    let mut sock = match NflogSocket::from_fd(fd).into_async() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%sandbox, error = %e, "cannot read the sandbox's NFLOG socket");
            let _ = done.send(Vec::new());
            return;
        }
    };
    let mut failures = 0u64;
    loop {
        tokio::select! {
            r = sock.recv() => match r {
                Ok(packets) => {
                    for ev in summarise(&sandbox, &packets) {
                        publish(&s, &sandbox, &launcher, ev).await;
                    }
                }
                Err(e) => {
                    // A flood overruns the socket (ENOBUFS) again and again: say so on the 1st,
                    // 2nd, 4th, 8th... time, not 20 times a second.
                    failures += 1;
                    if failures.is_power_of_two() {
                        tracing::warn!(%sandbox, error = %e, failures, "NFLOG read failed");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        }
    }
    // The tail: whatever the kernel queued before the sandbox ended. The kernel sends a batch
    // after its flush timeout (10 ms), so a launcher that reports blocked traffic waits for it.
    let mut sync = sock.into_inner();
    let last_batch = std::time::Duration::from_millis(30);
    let flushing = flush.load(std::sync::atomic::Ordering::Acquire);
    let wait = if flushing { last_batch } else { std::time::Duration::ZERO };
    let _ = done.send(drain(&s, &sandbox, &mut sync, wait));
    if !flushing {
        // Nobody waits for the last batch, but the store and the Telegram bot still want it.
        drain(&s, &sandbox, &mut sync, last_batch);
    }
}

/// Reads what the socket delivers within `wait` (then what is queued, for at most 200 ms): alerts,
/// store events, and the first 1,000 events as JSON. Bounded, because a sandbox that
/// floods packets must not hold a worker thread or grow the tail without end.
#[cfg(target_os = "linux")]
fn drain(
    s: &Shared,
    sandbox: &str,
    sync: &mut sandgate_monitor::nflog::NflogSocket,
    mut wait: std::time::Duration,
) -> Vec<Value> {
    const TAIL_MAX: usize = 1000;
    let until = std::time::Instant::now() + wait + std::time::Duration::from_millis(200);
    let mut tail = Vec::new();
    while let Ok(packets) = tokio::task::block_in_place(|| sync.recv(wait)) {
        wait = std::time::Duration::ZERO;
        if packets.is_empty() {
            break;
        }
        for ev in summarise(sandbox, &packets) {
            if tail.len() < TAIL_MAX
                && let Ok(v) = serde_json::to_value(&ev)
            {
                tail.push(v);
            }
            alert(s, sandbox, &ev);
            s.publish(EventKind::BlockedPacket, Some(sandbox), ev);
        }
        if std::time::Instant::now() > until {
            tracing::warn!(%sandbox, "NFLOG tail still flowing after 200 ms; the rest is dropped");
            break;
        }
    }
    tail
}

/// Non-Linux: there is no NFLOG; the descriptor is dropped.
#[cfg(not(target_os = "linux"))]
pub async fn read_nflog(
    _s: Arc<Shared>,
    _sandbox: String,
    _fd: OwnedFd,
    _launcher: mpsc::Sender<String>,
    _stop: watch::Receiver<bool>,
    _flush: Arc<std::sync::atomic::AtomicBool>,
    done: oneshot::Sender<Vec<Value>>,
) {
    let _ = done.send(Vec::new());
}

/// A blocked-traffic alert for the Telegram bot, when there is one.
#[cfg(target_os = "linux")]
fn alert(s: &Shared, sandbox: &str, ev: &Event) {
    if let Event::Blocked { protocol, dst, port, count, .. } = ev
        && let Some(bot) = s.telegram.get()
    {
        let dest = match port {
            Some(p) => format!("{dst}:{p}/{protocol}"),
            None => format!("{dst}/{protocol}"),
        };
        let sandbox = sandgate_config::sanitize(sandbox);
        bot.alert(sandgate_approvals::telegram::AlertMessage {
            sandbox: sandbox.clone().into_owned(),
            key: format!("{sandbox} → {dest}"),
            text: format!("{sandbox}: blocked direct connection to {dest}"),
            count: *count,
        });
    }
}

#[cfg(target_os = "linux")]
async fn publish(s: &Shared, sandbox: &str, launcher: &mpsc::Sender<String>, ev: Event) {
    alert(s, sandbox, &ev);
    if let Ok(mut l) = serde_json::to_string(&ev) {
        l.push('\n');
        let _ = launcher.try_send(l);
    }
    s.publish(EventKind::BlockedPacket, Some(sandbox), ev);
}

/// One event per (protocol, destination, port) in a batch, with its count.
#[cfg(target_os = "linux")]
pub fn summarise(sandbox: &str, packets: &[sandgate_monitor::BlockedPacket]) -> Vec<Event> {
    let mut groups: BTreeMap<(String, String, Option<u16>), u64> = BTreeMap::new();
    for p in packets {
        let port = match p.protocol {
            sandgate_monitor::Protocol::Icmp | sandgate_monitor::Protocol::Icmpv6 => {
                p.icmp_type.map(u16::from)
            }
            _ => p.dst_port,
        };
        let proto = format!("{:?}", p.protocol).to_lowercase();
        *groups.entry((proto, p.dst.to_string(), port)).or_default() += 1;
    }
    groups
        .into_iter()
        .map(|((protocol, dst, port), count)| Event::Blocked {
            sandbox: sandbox.to_owned(),
            protocol,
            dst,
            port,
            count,
        })
        .collect()
}
