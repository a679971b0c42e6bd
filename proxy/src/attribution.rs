//! Which process opened a connection: asked of an [`Attributor`] once per accepted connection,
//! off the accept path.
//!
//! The lookup starts as soon as a connection is accepted (while the client still holds its
//! socket: a short-lived client may have exited by the time the connection ends) and runs in a
//! task of its own, so no stage waits for it but those that show it to someone:
//!
//! - `ask` waits for it, at most [`ProxyConfig::attribution_wait`](crate::ProxyConfig), so the
//!   question names the process when it can and is asked without it when the lookup is slow;
//! - a refusal's event waits as long (refusals are recorded before the client hears of them, and
//!   are not the tunnels/s path);
//! - every other event takes what is known when the connection ends; a lookup still running
//!   then records the event when it ends (bounded the same way), a moment later.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sandgate_config::ProcessInfo;
use tokio::sync::watch;

use crate::traits::{BoxFuture, SandboxId};

/// Finds the process in a sandbox that holds the client end of a connection. Implemented by
/// the daemon (which knows the sandboxes' processes); tests replace it.
pub trait Attributor: Send + Sync + 'static {
    /// The process of `sandbox` whose socket has the local address `client` and the remote
    /// address `server` (as that socket sees them, in the sandbox's network namespace: the
    /// proxy listener for CONNECT, SOCKS5 and plain HTTP, the original destination for a
    /// transparent connection). `None` when it cannot be found (the client is gone, the
    /// sandbox is not known).
    fn attribute<'a>(
        &'a self,
        sandbox: &'a SandboxId,
        client: SocketAddr,
        server: SocketAddr,
    ) -> BoxFuture<'a, Option<ProcessInfo>>;
}

/// What a lookup has found so far.
#[derive(Clone, Debug)]
enum Found {
    Looking,
    Done(Option<ProcessInfo>),
}

/// The lookup of one connection's process, shared by every request of the connection. Cheap to
/// clone; [`Attribution::none`] when nothing is looked up (no attributor, the DNS stub).
#[derive(Clone, Debug, Default)]
pub(crate) struct Attribution(Option<watch::Receiver<Found>>);

impl Attribution {
    /// No lookup: the process is unknown.
    pub(crate) fn none() -> Attribution {
        Attribution(None)
    }

    /// Starts the lookup in a task of its own.
    pub(crate) fn start(
        attributor: &Arc<dyn Attributor>,
        sandbox: SandboxId,
        client: SocketAddr,
        server: SocketAddr,
    ) -> Attribution {
        let (tx, rx) = watch::channel(Found::Looking);
        let attributor = attributor.clone();
        tokio::spawn(async move {
            let found = attributor.attribute(&sandbox, client, server).await;
            let _ = tx.send(Found::Done(found));
        });
        Attribution(Some(rx))
    }

    /// The process, if the lookup has ended (`None` while it runs, or when it found nothing).
    pub(crate) fn now(&self) -> Option<ProcessInfo> {
        match &*self.0.as_ref()?.borrow() {
            Found::Done(found) => found.clone(),
            Found::Looking => None,
        }
    }

    /// Whether a lookup is still running.
    pub(crate) fn looking(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| matches!(&*rx.borrow(), Found::Looking))
    }

    /// The process, waiting for the lookup at most `bound`.
    pub(crate) async fn wait(&self, bound: Duration) -> Option<ProcessInfo> {
        let mut rx = self.0.clone()?;
        let done = tokio::time::timeout(bound, rx.wait_for(|f| matches!(f, Found::Done(_))));
        match done.await {
            Ok(Ok(found)) => match &*found {
                Found::Done(found) => found.clone(),
                Found::Looking => None,
            },
            // Too slow, or the lookup's task ended without a word (it panicked).
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::Notify;

    use super::*;

    struct Slow(Arc<Notify>);

    impl Attributor for Slow {
        fn attribute<'a>(
            &'a self,
            _sandbox: &'a SandboxId,
            client: SocketAddr,
            _server: SocketAddr,
        ) -> BoxFuture<'a, Option<ProcessInfo>> {
            Box::pin(async move {
                self.0.notified().await;
                Some(ProcessInfo {
                    pid: client.port().into(),
                    exe: "/bin/x".into(),
                    command: "x".into(),
                })
            })
        }
    }

    #[tokio::test]
    async fn a_lookup_is_waited_for_within_its_bound_only() {
        let gate = Arc::new(Notify::new());
        let attributor: Arc<dyn Attributor> = Arc::new(Slow(gate.clone()));
        let a = Attribution::start(
            &attributor,
            SandboxId::new("sg-t"),
            "127.0.0.1:4000".parse().unwrap(),
            "127.0.0.1:3128".parse().unwrap(),
        );
        assert!(a.looking());
        assert_eq!(a.now(), None);
        assert_eq!(a.wait(Duration::from_millis(1)).await, None, "the bound passes first");
        gate.notify_one();
        let found = a.wait(Duration::from_secs(30)).await.expect("found");
        assert_eq!(found.pid, 4000);
        assert!(!a.looking());
        assert_eq!(a.now(), Some(found));
        let none = Attribution::none();
        assert!(!none.looking());
        assert_eq!(none.wait(Duration::from_secs(30)).await, None);
    }
}
